//! One integration test binary (faster to link, one place for the harness).

mod harness;

mod client;
mod gate;
mod locks;
mod protocol;
mod worker;
