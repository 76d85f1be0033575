//! Link the binaries as position-dependent executables where that is safe to ask for.
//!
//! A position-independent `conductor` starts with ~21,000 relative relocations to apply:
//! the dynamic loader writes into ~90 pages of its read-only data, each a copy-on-write
//! fault, in every process — 0.5–0.8 ms of the ~2 ms a `conductor submit` or `send` costs
//! to start here (`perf stat -r 100 conductor --version`: 1.75–2.14 ms of CPU, 263
//! faults, against 1.27–1.32 ms, 210 faults). The code stays position-independent; only
//! the final link is told its address, so nothing else is rebuilt for it.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env == "gnu" {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
