//! What a gate file records about its holder (`GateHolder`).

use serde::{Deserialize, Serialize};

use crate::host;

/// What a gate file records about its holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateHolder {
    pub pid: u32,
    pub role: String,
    pub host: String,
    pub since: String,
    /// `host::host_id()` of the holder (absent in records of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_id: Option<String>,
    /// For a holder on another host: how its lease was judged (e.g. "alive on host b
    /// (pid 12), heartbeat 2s ago (lease 120s)").
    #[serde(skip)]
    pub lease: Option<String>,
}

impl GateHolder {
    /// Whether the holder is a process of this host (its pid may be looked at here).
    pub fn is_this_host(&self) -> bool {
        host::is_this_host(self.host_id.as_deref(), Some(&self.host))
    }
}
