//! `conductor`: the command-line front end. Everything it does lives in the library
//! (`conductor::programs`).

fn main() {
    std::process::exit(conductor::programs::conductor());
}
