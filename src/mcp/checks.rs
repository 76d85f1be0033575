//! Checks of a tool call's arguments that its input schema cannot express, made before anything is written: each failure a tool error naming the field, rather than a task rejected later by its worker.

/// A prompt (the argument `field`) must say something: not empty, not only whitespace.
pub fn prompt(field: &str, text: &str) -> Result<(), String> {
    if text.trim().is_empty() {
        return Err(format!(
            "`{field}` is blank (only whitespace): say what the agent should do"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_prompts_and_unknown_modes_are_named() {
        use crate::verbs::spec::check_permission_mode as permission_mode;
        assert!(prompt("prompt", "do it").is_ok());
        assert!(prompt("prompt", " \n\t")
            .unwrap_err()
            .contains("`prompt` is blank"));
        assert!(permission_mode(None, "plan").is_ok());
        assert!(permission_mode(None, "auto_edit").is_ok());
        assert!(permission_mode(Some("claude"), "auto_edit").is_err());
        let e = permission_mode(None, "godmode").unwrap_err();
        assert!(
            e.contains("`permissionMode`") && e.contains("godmode"),
            "{e}"
        );
    }
}
