//! Doctor checks of the root directory itself and of its `config.json`.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;

use crate::config::Config;
use crate::error::Error;
use crate::layout::Root;

use super::check::Check;

/// The root exists, is a directory and is private; false when nothing else can be
/// checked.
pub(super) fn check_root(root: &Root, checks: &mut Vec<Check>) -> bool {
    let path = root.path();
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            checks.push(Check::fail(
                "root",
                format!("{} does not exist", path.display()),
                "create it with `conductor init` for this same root, or point the root \
                 (CONDUCTOR_HOME) at yours",
            ));
            return false;
        }
        Err(e) => {
            checks.push(Check::fail(
                "root",
                Error::io("stat", path, e).to_string(),
                "check the path and its permissions",
            ));
            return false;
        }
    };
    if !meta.is_dir() {
        checks.push(Check::fail(
            "root",
            format!("{} is not a directory", path.display()),
            "point the root (CONDUCTOR_HOME) at a directory",
        ));
        return false;
    }
    let mode = meta.permissions().mode() & 0o7777;
    checks.push(if mode & 0o077 != 0 {
        Check::warn(
            "root",
            format!(
                "{} is mode {mode:04o}; others can read tasks and results",
                path.display()
            ),
            format!("chmod 700 {}", path.display()),
        )
    } else {
        Check::ok(
            "root",
            format!("{} exists, mode {mode:04o}", path.display()),
        )
    });
    if !root.workers_dir().is_dir() {
        checks.push(Check::warn(
            "slots",
            "no workers/ directory: no slot was ever created",
            "`conductor init N` creates slots 0..N-1",
        ));
    }
    true
}

pub(super) fn check_config(root: &Root) -> Check {
    let path = root.config_file();
    match Config::load(&path) {
        Ok(_) if !path.exists() => Check::ok("config", "no config.json: all defaults"),
        Ok(_) => Check::ok("config", format!("{} parses", path.display())),
        Err(e) => Check::fail(
            "config",
            e.to_string(),
            format!("fix or remove {}", path.display()),
        ),
    }
}
