//! Software prefetch: a hint to the CPU to start loading memory that is
//! about to be used.
//!
//! Fan-out to 10,000 watches is bound by memory, not by instructions:
//! each watch's state (its queue, its session) lies in allocations of
//! its own, far apart, and the first touch of each waits for DRAM. Loops
//! over many watches know which ones come next, so they ask for the
//! memory a few iterations ahead; the loads then overlap instead of
//! queueing one after another. A hint only: it never faults, and on other
//! architectures it does nothing.

/// Bytes in a cache line on the CPUs Tern runs on.
pub(crate) const CACHE_LINE_BYTES: usize = 64;
/// Most lines one call asks for.
pub(crate) const LINES_MAX: usize = 24;

/// Asks for the first `lines` cache lines (at most `LINES_MAX`) at `ptr`.
#[inline]
pub(crate) fn prefetch<T: ?Sized>(ptr: *const T, lines: usize) {
    let start = ptr as *const u8;
    for line in 0..lines.min(LINES_MAX) {
        prefetch_line(start.wrapping_add(line * CACHE_LINE_BYTES));
    }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn prefetch_line(address: *const u8) {
    // SAFETY: a prefetch is a hint; it reads nothing the program sees and
    // never faults, whatever the address.
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address as *const i8) }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn prefetch_line(_address: *const u8) {}
