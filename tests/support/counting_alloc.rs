//! A counting global allocator, shared by `tests/no_alloc.rs` and `benches/graphs` (both
//! include this file with `#[path = ...] mod counting_alloc;`): one implementation.
//!
//! It counts the allocations (`alloc`, `alloc_zeroed`, `realloc`) of the current thread only,
//! and only inside a measured section ([`count`]), so other threads cannot disturb a count.
//! With [`set_backtraces`] on it prints a backtrace for every allocation it counts.
//!
//! Including this module installs the allocator (`#[global_allocator]`) in that binary.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

struct Counting;

thread_local! {
    /// Whether this thread is inside a measured section.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    /// Allocations counted in the current section.
    static COUNT: Cell<u64> = const { Cell::new(0) };
    /// Set while a backtrace is captured and printed (its own allocations are not counted).
    static REPORTING: Cell<bool> = const { Cell::new(false) };
}

/// Whether to print a backtrace for each counted allocation ([`set_backtraces`]).
static BACKTRACES: AtomicBool = AtomicBool::new(false);

fn record(bytes: usize) {
    // `try_with`: thread-locals may be gone while a thread exits; nothing is measured then.
    let measuring = MEASURING.try_with(Cell::get).unwrap_or(false);
    let reporting = REPORTING.try_with(Cell::get).unwrap_or(true);
    if !measuring || reporting {
        return;
    }
    let n = COUNT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    if BACKTRACES.load(Ordering::Relaxed) {
        REPORTING.with(|r| r.set(true));
        let bt = std::backtrace::Backtrace::force_capture();
        eprintln!("--- counted allocation #{n} ({bytes} bytes) in a measured section:\n{bt}");
        REPORTING.with(|r| r.set(false));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting does not touch
// the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` as a measured section and returns how many allocations this thread made in it.
pub fn count<R>(f: impl FnOnce() -> R) -> (u64, R) {
    struct Section;
    impl Drop for Section {
        fn drop(&mut self) {
            MEASURING.with(|m| m.set(false));
        }
    }
    COUNT.with(|c| c.set(0));
    MEASURING.with(|m| m.set(true));
    let section = Section;
    let r = f();
    drop(section);
    (COUNT.with(Cell::get), r)
}

/// Prints (`true`) or stops printing a backtrace for each counted allocation.
#[allow(dead_code)] // reason: used by tests/no_alloc.rs only (the bench does not print them)
pub fn set_backtraces(on: bool) {
    BACKTRACES.store(on, Ordering::Relaxed);
}
