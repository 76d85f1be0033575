//! Changing one key of a root's `config.json` from a command (`conductor parallel`), keeping every other key as the file has it.

use std::path::Path;

use serde_json::{Map, Value};

use super::Config;
use crate::error::{Error, FileProblem, Result};
use crate::fsio::{self, Durability, SMALL_FILE_LIMIT};

/// Set `key` to `value` in the config file at `path` (`None` removes it), after checking
/// that the whole file stays valid; the other keys, known or not, are kept as they are.
/// Returns the configuration now in force. Two commands changing the file at once: the
/// last one's write wins whole (each write replaces the file atomically).
pub fn set_key(path: &Path, key: &str, value: Option<Value>) -> Result<Config> {
    let mut doc: Map<String, Value> = fsio::read_json(path, SMALL_FILE_LIMIT)?.unwrap_or_default();
    match value {
        Some(v) => doc.insert(key.to_string(), v),
        None => doc.remove(key),
    };
    let doc = Value::Object(doc);
    let invalid = |why: String| Error::bad(path, FileProblem::Invalid(why));
    let config: Config = serde_json::from_value(doc.clone()).map_err(|e| invalid(e.to_string()))?;
    config.validate().map_err(invalid)?;
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("a JSON value serializes");
    bytes.push(b'\n');
    fsio::write_replace(path, &bytes, Durability::Durable)?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_set_and_removed_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, r#"{"leaseSecs": 30, "someFutureKey": [1]}"#).unwrap();
        let c = set_key(&path, "maxRunning", Some(Value::from(3))).unwrap();
        assert_eq!(c.max_running, Some(3));
        let doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["leaseSecs"], 30);
        assert_eq!(doc["someFutureKey"], serde_json::json!([1]));
        assert_eq!(Config::load(&path).unwrap().max_running, Some(3));
        let c = set_key(&path, "maxRunning", None).unwrap();
        assert_eq!(c.max_running, None);
        assert!(!std::fs::read_to_string(&path)
            .unwrap()
            .contains("maxRunning"));
    }

    #[test]
    fn an_invalid_value_is_refused_naming_the_file_and_the_file_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let e = set_key(&path, "maxRunning", Some(Value::from(0))).unwrap_err();
        let said = e.to_string();
        assert!(
            said.contains("config.json") && said.contains("maxRunning"),
            "{said}"
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }
}
