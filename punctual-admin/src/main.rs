//! `punctual-admin`: see `punctual-admin --help`, and the crate's docs.

fn main() -> std::process::ExitCode {
    punctual_admin::cli::run(std::env::args_os())
}
