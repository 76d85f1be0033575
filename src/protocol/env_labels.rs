//! A task's `env` (extra variables for its agent) and `labels`: parsing and checks.

use std::collections::HashSet;

use super::task::Task;

/// Most labels one task may carry.
pub const MAX_LABELS: usize = 32;
/// Largest `env`, names and values together: it reaches the agent in its environment,
/// beside `CONDUCTOR_CONTEXT`, and Linux caps the whole environment.
pub const MAX_ENV_BYTES: usize = 64 * 1024;

/// The prefix of the variables conductor sets itself; a task may not set them.
const RESERVED_PREFIX: &str = "CONDUCTOR_";

/// `K=V` as given on a command line (`--env`): the name must be a variable name
/// (letters, digits, `_`, not starting with a digit) and not `CONDUCTOR_*`; the value
/// is everything after the first `=` (it may be empty or hold `=`).
pub fn parse_env_assignment(arg: &str) -> Result<(String, String), String> {
    let Some((name, value)) = arg.split_once('=') else {
        return Err(format!(
            "{arg:?} is not NAME=VALUE (an environment variable for the agent)"
        ));
    };
    check_env_name(name)?;
    check_env_value(name, value)?;
    Ok((name.to_string(), value.to_string()))
}

fn check_env_name(name: &str) -> Result<(), String> {
    let mut bytes = name.bytes();
    let starts_well = bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_');
    if !starts_well || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_') || name.len() > 256 {
        return Err(format!(
            "env name {name:?} is not a variable name (letters, digits and _, not starting \
             with a digit)"
        ));
    }
    if name.to_ascii_uppercase().starts_with(RESERVED_PREFIX) {
        return Err(format!(
            "env name {name} is reserved: conductor sets the {RESERVED_PREFIX}* variables itself"
        ));
    }
    Ok(())
}

fn check_env_value(name: &str, value: &str) -> Result<(), String> {
    if value.contains('\0') {
        return Err(format!("env {name}: the value holds a NUL byte"));
    }
    Ok(())
}

/// Check a label: 1–64 characters of `A-Z a-z 0-9 . _ - : /`.
fn check_label(label: &str) -> Result<(), String> {
    if label.is_empty()
        || label.len() > 64
        || !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':' | b'/'))
    {
        return Err(format!(
            "label {label:?} must be 1 to 64 characters of A-Z a-z 0-9 . _ - : /"
        ));
    }
    Ok(())
}

impl Task {
    /// Add `NAME=VALUE` to the agent's environment.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> Task {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Add a label.
    pub fn with_label(mut self, label: impl Into<String>) -> Task {
        self.labels.push(label.into());
        self
    }

    /// Whether the task carries `label`.
    pub fn has_label(&self, label: &str) -> bool {
        self.labels.iter().any(|l| l == label)
    }

    /// The part of [`Task::validate`] about `env` and `labels`.
    pub(super) fn validate_env_and_labels(&self) -> Result<(), String> {
        let mut bytes = 0;
        for (name, value) in &self.env {
            check_env_name(name)?;
            check_env_value(name, value)?;
            bytes += name.len() + value.len() + 2;
        }
        if bytes > MAX_ENV_BYTES {
            return Err(format!(
                "env is {bytes} bytes; at most {MAX_ENV_BYTES} reach the agent (put large \
                 data in a file and pass its path)"
            ));
        }
        if self.labels.len() > MAX_LABELS {
            return Err(format!(
                "labels lists {} labels; at most {MAX_LABELS} are allowed",
                self.labels.len()
            ));
        }
        let mut seen = HashSet::new();
        for label in &self.labels {
            check_label(label)?;
            if !seen.insert(label.as_str()) {
                return Err(format!("labels name {label:?} twice"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_assignments_parse_and_reserved_names_are_refused() {
        assert_eq!(
            parse_env_assignment("A_1=x=y").unwrap(),
            ("A_1".to_string(), "x=y".to_string())
        );
        assert_eq!(
            parse_env_assignment("EMPTY=").unwrap(),
            ("EMPTY".to_string(), String::new())
        );
        assert!(parse_env_assignment("NOEQUALS")
            .unwrap_err()
            .contains("NAME=VALUE"));
        assert!(parse_env_assignment("1X=a")
            .unwrap_err()
            .contains("variable name"));
        assert!(parse_env_assignment("CONDUCTOR_X=a")
            .unwrap_err()
            .contains("reserved"));
        assert!(parse_env_assignment("conductor_home=a")
            .unwrap_err()
            .contains("reserved"));
    }

    #[test]
    fn env_and_labels_round_trip_and_older_tasks_still_parse() {
        let t = Task::new("p").with_env("A", "1").with_label("team:x");
        t.validate().unwrap();
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["env"], serde_json::json!({"A": "1"}));
        assert_eq!(json["labels"], serde_json::json!(["team:x"]));
        assert_eq!(serde_json::from_value::<Task>(json).unwrap(), t);
        let old: Task = serde_json::from_str(r#"{"prompt":"p"}"#).unwrap();
        assert!(old.env.is_empty() && old.labels.is_empty());
        let plain = serde_json::to_value(Task::new("p")).unwrap();
        assert!(plain.get("env").is_none() && plain.get("labels").is_none());
    }

    #[test]
    fn bad_labels_and_env_in_a_file_are_refused() {
        assert!(Task::new("p").with_label("a b").validate().is_err());
        assert!(Task::new("p")
            .with_label("x")
            .with_label("x")
            .validate()
            .unwrap_err()
            .contains("twice"));
        assert!(Task::new("p")
            .with_env("CONDUCTOR_WORKER", "9")
            .validate()
            .unwrap_err()
            .contains("reserved"));
    }
}
