//! What an `Exec` holds: reference counts of the allocations its DAG refers to (each one's
//! use list told about the graph once), its pinned and lent allocations, and the locking of
//! their use lists around a launch.

use super::*;

/// Whether `a` is kept in an `Exec`'s pinned list (its use list locked around each launch):
/// pinned host memory, and memory lent by cudarc. One test for `hold_in` and `release_in`.
fn listed(a: &Allocation) -> bool {
    a.space == MemorySpace::PinnedHost || a.is_lent()
}

/// Notes one more reference to `a` in an `Exec`'s reference counts (`held`), its pinned list
/// and the allocation's use list (the first reference only).
pub(super) fn hold_in(
    held: &mut HashMap<usize, u32, BuildHasherDefault<AddrHasher>>,
    pinned: &mut Vec<Arc<Allocation>>,
    log: &Arc<ExecLaunches>,
    a: &Arc<Allocation>,
) {
    let n = held.entry(Arc::as_ptr(a) as usize).or_insert(0);
    *n += 1;
    if *n == 1 {
        a.uses.add_graph(log);
        if listed(a) {
            let at = pinned.partition_point(|p| Arc::as_ptr(p) < Arc::as_ptr(a));
            pinned.insert(at, a.clone());
        }
    }
}

/// Notes one reference fewer to `a` in an `Exec`'s reference counts (`held`); the last one
/// removes its entry (and `a` from the pinned list) and returns `true`.
pub(super) fn release_in(
    held: &mut HashMap<usize, u32, BuildHasherDefault<AddrHasher>>,
    pinned: &mut Vec<Arc<Allocation>>,
    a: &Arc<Allocation>,
) -> bool {
    let key = Arc::as_ptr(a) as usize;
    let n = held.get_mut(&key).expect("released allocations were held");
    *n -= 1;
    if *n > 0 {
        return false;
    }
    // No entry stays behind for an allocation the DAG no longer refers to: a long run of
    // updates that swap buffers would otherwise grow the map without bound.
    held.remove(&key);
    if listed(a) {
        pinned.retain(|p| !Arc::ptr_eq(p, a));
    }
    true
}

/// A hasher for allocation addresses (distinct, 256-byte-aligned-ish `Arc` pointers): one
/// multiplication instead of SipHash, which `hold` would run once per node at instantiation.
#[derive(Default)]
pub(crate) struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        // Fibonacci hashing; the high bits (which hashbrown uses for its control bytes) mix
        // every bit of the address.
        self.0 = (n as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(26);
    }
}

/// Runs `f` with the use lists of `allocs` locked (in address order, as `allocs` is sorted),
/// without allocating.
pub(super) fn with_locked<R>(allocs: &[Arc<Allocation>], f: &mut dyn FnMut() -> R) -> R {
    match allocs.split_first() {
        None => f(),
        Some((a, rest)) => {
            let _guard = a.uses.lock();
            with_locked(rest, f)
        }
    }
}
