/// mimalloc: the GET path allocates a few small buffers per request, and
/// glibc malloc showed up as ~9% of CPU in `perf` profiles of it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Turns transparent huge pages off for this process. mimalloc asks for
/// them on its arenas (`madvise(MADV_HUGEPAGE)`), and a 2 MiB page is
/// resident whole once any byte of it is touched: a snapshot restore's
/// short-lived buffers, spread over an arena, held a node's RSS at 0.8-1.2
/// GB while restoring 10M records (of which 0.5 GB in huge pages) against
/// 0.3 GB without them, so memory grew with the data restored instead of
/// staying within the configured caches (BENCHMARKS.md, "Scale").
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // The arguments are read as unsigned longs: passed as such.
        let (on, unused) = (1 as libc::c_ulong, 0 as libc::c_ulong);
        // SAFETY: PR_SET_THP_DISABLE takes integer arguments only and sets
        // a flag of this process; it runs before any thread of ours exists.
        let result = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) };
        if result != 0 {
            eprintln!("warning: transparent huge pages stay on: prctl: {}", std::io::Error::last_os_error());
        }
    }
}

fn main() {
    no_transparent_huge_pages();
    if let Err(e) = tern::cli::main() {
        eprintln!("error: {e:#}");
        std::process::exit(tern::cli::exit_status_of(&e));
    }
}
