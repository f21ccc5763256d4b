/// mimalloc: the GET path allocates a few small buffers per request, and
/// glibc malloc showed up as ~9% of CPU in `perf` profiles of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if let Err(e) = tern::cli::main() {
        eprintln!("error: {e:#}");
        std::process::exit(tern::cli::exit_status_of(&e));
    }
}
