//! `conductor-worker N DIR`: serve one worker slot (same as `conductor worker`).

fn main() {
    std::process::exit(conductor::programs::conductor_worker());
}
