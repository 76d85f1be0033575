//! The `edit` verb (`conductor edit`, the MCP `edit` tool): change a task that still waits in the shared queue, each field given replacing that field.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use crate::tasks::edit::TaskEdit;
use crate::verbs::spec::IdArg;
use crate::{Client, Error, Task, TaskId};

/// What an edit may change, described once: `conductor edit`'s options and the MCP
/// `edit` tool's arguments (each flattens it). Each field given replaces that field.
#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args, schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct EditSpec {
    /// The new prompt (instead of opening an editor).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_name = "TEXT", conflicts_with = "file")
    )]
    pub prompt: Option<String>,
    /// Read the new prompt from FILE (`-` for stdin).
    #[cfg_attr(feature = "cli", arg(short, long, value_name = "FILE"))]
    #[serde(skip)]
    #[cfg_attr(feature = "cli", schemars(skip))]
    pub file: Option<PathBuf>,
    /// Priority 0-9; higher runs first.
    #[cfg_attr(feature = "cli", arg(long, value_name = "0-9",
        value_parser = clap::value_parser!(u8).range(0..=9)))]
    #[cfg_attr(feature = "cli", schemars(range(max = 9)))]
    pub priority: Option<u8>,
    /// Serialization key (`--key ''` removes it).
    #[cfg_attr(feature = "cli", arg(long, value_name = "KEY"))]
    pub key: Option<String>,
    /// Run only after these tasks have succeeded (replaces the list; `''` clears it).
    #[cfg_attr(feature = "cli", arg(long, value_name = "ID[,ID…]", value_delimiter = ',',
        value_parser = IdArg::parse_arg))]
    pub after: Option<Vec<IdArg>>,
    /// Set the agent's extra environment to these NAME=VALUE (repeat; replaces the
    /// task's; `--env ''` clears it).
    ///
    /// Over MCP an object, {"NAME": "value"} ({} clears it).
    #[cfg_attr(feature = "cli", arg(long = "env", value_name = "NAME=VALUE",
        value_parser = env_or_clear))]
    #[serde(default, deserialize_with = "env_map")]
    #[cfg_attr(feature = "cli", schemars(with = "Option<BTreeMap<String, String>>"))]
    pub env: Option<Vec<(String, String)>>,
    /// Set the task's labels (repeat; replaces them; `--label ''` clears them).
    ///
    /// One named twice is kept once.
    #[cfg_attr(feature = "cli", arg(long = "label", value_name = "LABEL"))]
    pub labels: Option<Vec<String>>,
}

impl EditSpec {
    /// Whether it names any field to change (without one, the CLI opens an editor).
    pub fn any(&self) -> bool {
        self.prompt.is_some()
            || self.file.is_some()
            || self.priority.is_some()
            || self.key.is_some()
            || self.after.is_some()
            || self.env.is_some()
            || self.labels.is_some()
    }

    /// The change it describes (`file` read by the caller into `prompt` first):
    /// dependencies' short ids resolved on `client`'s root, empty values clearing.
    pub fn into_edit(self, client: &Client) -> crate::Result<TaskEdit> {
        let after = match self.after {
            None => None,
            Some(list) => {
                let mut ids = Vec::new();
                for dep in list.iter().filter(|d| **d != IdArg::Text(String::new())) {
                    let id = dep.id().map_err(|reason| Error::InvalidTask { reason })?;
                    ids.push(crate::ids::resolve(client.root(), &id)?);
                }
                Some(ids)
            }
        };
        let labels = self.labels.map(|given| {
            let mut kept: Vec<String> = Vec::new();
            for l in given.into_iter().filter(|l| !l.is_empty()) {
                if !kept.contains(&l) {
                    kept.push(l);
                }
            }
            kept
        });
        Ok(TaskEdit {
            prompt: self.prompt,
            priority: self.priority,
            key: self.key.map(|k| (!k.is_empty()).then_some(k)),
            after,
            env: self
                .env
                .map(|list| list.into_iter().filter(|(n, _)| !n.is_empty()).collect()),
            labels,
        })
    }
}

/// Edit queued task `id` as `spec` says; refused (naming why) when the new prompt is
/// empty or the task no longer waits in the shared queue. Answers the task as it waits.
pub fn edit(client: &Client, id: &TaskId, spec: EditSpec) -> crate::Result<Task> {
    let change = spec.into_edit(client)?;
    if let Some(reason) = change.refusal(id) {
        return Err(Error::InvalidTask { reason });
    }
    client.edit_task(id, None, |t| change.apply(t))
}

/// `--env NAME=VALUE`, or `--env ''` (an empty name: the list cleared).
#[cfg(feature = "cli")]
fn env_or_clear(s: &str) -> std::result::Result<(String, String), String> {
    if s.is_empty() {
        return Ok((String::new(), String::new()));
    }
    crate::protocol::parse_env_assignment(s)
}

/// `env` over MCP: {"NAME": "value"}.
fn env_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Option<Vec<(String, String)>>, D::Error> {
    Ok(Option::<BTreeMap<String, String>>::deserialize(d)?.map(|m| m.into_iter().collect()))
}

#[cfg(all(test, feature = "cli"))]
mod tests {
    use clap::Args as _;

    use super::*;

    /// Each field an edit may change is a flag of `conductor edit` and an argument of
    /// the MCP `edit` tool with a description, from the one struct.
    #[test]
    fn every_edit_field_is_a_flag_and_an_mcp_argument() {
        let schema = serde_json::to_value(schemars::schema_for!(EditSpec)).unwrap();
        let props = schema["properties"].as_object().unwrap();
        let mut from_schema: Vec<String> = props.keys().cloned().chain(["file".into()]).collect();
        from_schema.sort();
        let mut flags: Vec<String> = EditSpec::augment_args(clap::Command::new("t"))
            .get_arguments()
            .map(|a| a.get_id().to_string())
            .collect();
        flags.sort();
        assert_eq!(flags, from_schema);
        for (name, p) in props {
            assert!(p["description"].is_string(), "`{name}`: {p}");
        }
    }
}
