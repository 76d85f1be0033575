//! `config.json`: optional root-wide defaults (running cap, timeouts, lock lease).

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::dirlock::LockOptions;
use crate::error::Result;
use crate::fsio::{self, SMALL_FILE_LIMIT};
use crate::protocol::{check_schema, SCHEMA};

fn schema_v1() -> u32 {
    SCHEMA
}

/// Root-wide settings. Every field is optional; a missing file means all defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    #[serde(default = "schema_v1")]
    pub schema: u32,
    /// Cap on agents running at once across the root (shared queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_running: Option<u32>,
    /// Default task timeout when neither the task nor `--timeout` gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// How long a lock held from another host stays alive without a heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_secs: Option<u64>,
    /// How long a lock directory without an owner file counts as being acquired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_grace_secs: Option<u64>,
    /// Largest task file accepted, in bytes (default 4 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_task_bytes: Option<u64>,
    /// One running task per `key` (shared queue); default on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub per_key_serialization: Option<bool>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            schema: SCHEMA,
            max_running: None,
            timeout_secs: None,
            lease_secs: None,
            lock_grace_secs: None,
            max_task_bytes: None,
            per_key_serialization: None,
        }
    }
}

impl Config {
    /// Load `path`; a missing file is the default configuration.
    pub fn load(path: &Path) -> Result<Config> {
        let cfg: Config = fsio::read_json(path, SMALL_FILE_LIMIT)?.unwrap_or_default();
        check_schema(path, cfg.schema)?;
        Ok(cfg)
    }

    pub fn lock_options(&self) -> LockOptions {
        let d = LockOptions::default();
        LockOptions {
            grace: self
                .lock_grace_secs
                .map(Duration::from_secs)
                .unwrap_or(d.grace),
            lease: self.lease_secs.map(Duration::from_secs).unwrap_or(d.lease),
        }
    }

    /// One running task per key (default on).
    pub fn per_key_serialization(&self) -> bool {
        self.per_key_serialization.unwrap_or(true)
    }

    pub fn max_task_bytes(&self) -> u64 {
        self.max_task_bytes.unwrap_or(fsio::TASK_SIZE_LIMIT)
    }
}
