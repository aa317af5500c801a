//! [`Arena`]: cells carved one block after another from shared chunks, so that adding a kernel
//! node calls no allocator (`packed.rs` keeps a node's arguments in such a block).
//!
//! The arena never reads, writes or drops a cell: it hands out ranges of uninitialised slots,
//! each to one owner, which initialises, uses and drops what it puts there.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

/// Cells shared by the blocks carved from them, freed with the last block (and the arena, if
/// it still carves from it). A slot is an `UnsafeCell`: blocks write their own slots through
/// pointers derived from the shared chunk, and no two blocks share a slot.
pub(crate) type Chunk<T> = Arc<[Slot<T>]>;

/// A cell of a [`Chunk`], uninitialised until a block is carved over it.
#[repr(transparent)]
pub(crate) struct Slot<T>(UnsafeCell<MaybeUninit<T>>);

/// Blocks of cells carved one after another from shared chunks (a chunk holds the blocks of
/// hundreds of kernel nodes). A chunk is freed when the last block carved from it is dropped
/// and the arena has moved on; the room of a dropped block is not reused before.
///
/// Cloning gives an empty arena: a clone never carves from the chunk the original carves
/// from.
pub(crate) struct Arena<T> {
    /// The chunk being carved, and how many of its cells are taken.
    current: Option<(Chunk<T>, usize)>,
}

impl<T> Default for Arena<T> {
    fn default() -> Self {
        Arena { current: None }
    }
}

impl<T> Clone for Arena<T> {
    fn clone(&self) -> Self {
        Arena::default()
    }
}

// SAFETY: the arena reads, writes and drops no cell (a slot is `MaybeUninit`: no drop glue).
// It hands out ranges of its chunk that are disjoint, inside the chunk and never handed out
// twice (`take`, through `&mut self`), each then used only by its owner, whose own `Send` and
// `Sync` cover what it keeps there; a clone starts empty, so no two arenas hand out one chunk.
// What it shares across threads is the chunk's reference count (atomic).
unsafe impl<T> Send for Arena<T> {}
// SAFETY: shared access to the arena touches no chunk at all (only `&mut self` takes cells).
unsafe impl<T> Sync for Arena<T> {}

impl<T> Arena<T> {
    /// The smallest and the largest chunk the arena allocates (in cells); each new chunk is
    /// twice the one before, so small DAGs stay small.
    pub(crate) const FIRST: usize = 64;
    pub(crate) const MOST: usize = 8192;

    /// `len` cells (`len >= 1`) of a chunk of exactly that size, for a block on its own (such
    /// as a clone's: no room kept for blocks that will not come).
    pub(crate) fn alone(len: usize) -> (NonNull<T>, Chunk<T>) {
        let chunk = Self::chunk(len);
        (slots(&chunk, 0, len), chunk)
    }

    /// A chunk of `len` uninitialised cells.
    fn chunk(len: usize) -> Chunk<T> {
        (0..len)
            .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
            .collect()
    }

    /// `len` untaken cells (`len >= 1`), uninitialised, and the chunk they are in, which the
    /// caller keeps as long as it uses them. A block larger than the largest chunk gets a
    /// chunk of its own.
    pub(crate) fn take(&mut self, len: usize) -> (NonNull<T>, Chunk<T>) {
        let (chunk, at) = match &mut self.current {
            Some((chunk, used)) if chunk.len() - *used >= len => {
                let at = *used;
                *used += len;
                (chunk.clone(), at)
            }
            current => {
                let next = current
                    .as_ref()
                    .map_or(Self::FIRST, |(c, _)| (2 * c.len()).min(Self::MOST));
                if len > next {
                    return Self::alone(len);
                } else {
                    let chunk = Self::chunk(next);
                    *current = Some((chunk.clone(), len));
                    (chunk, 0)
                }
            }
        };
        (slots(&chunk, at, len), chunk)
    }

    /// The chunk being carved, if any.
    #[cfg(test)]
    pub(crate) fn current(&self) -> Option<&Chunk<T>> {
        self.current.as_ref().map(|(c, _)| c)
    }
}

/// Cells `at..at + len` of `chunk` (a block: `len >= 1`), as a pointer that may write them.
///
/// # Panics
/// If they are not all inside the chunk (`take` never asks for such cells).
fn slots<T>(chunk: &Chunk<T>, at: usize, len: usize) -> NonNull<T> {
    assert!(
        len >= 1 && at < chunk.len() && len <= chunk.len() - at,
        "a block lies inside its chunk"
    );
    // No reference to the slots is made: the pointer comes from the chunk's own, and a `Slot`
    // is a transparent `UnsafeCell<MaybeUninit<T>>`, so it may write the cells although the
    // chunk is shared, and they have `T`'s layout.
    let first = Arc::as_ptr(chunk).cast::<Slot<T>>().cast_mut();
    // SAFETY: `at` is inside the chunk (asserted).
    let p = unsafe { first.add(at) };
    // SAFETY: inside a live allocation, so not null.
    unsafe { NonNull::new_unchecked(p.cast::<T>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "a block lies inside its chunk")]
    fn cells_past_a_chunk_are_never_handed_out() {
        let chunk = Arena::<u64>::chunk(8);
        let _ = slots(&chunk, 4, 5);
    }
}
