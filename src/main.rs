fn main() {
    if let Err(e) = tern::cli::main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
