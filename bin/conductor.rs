//! `conductor`: the command-line front end. Everything it does lives in `conductor::cli`.

fn main() {
    std::process::exit(conductor::cli::conductor_main());
}
