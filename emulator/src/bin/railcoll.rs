//! The `railcoll` command: see `railcoll --help` and `docs/howto.md`.

fn main() {
    std::process::exit(railcoll_emu::cli::main_with(std::env::args()));
}
