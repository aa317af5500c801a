//! Kernel arguments as graph nodes keep them: [`PackedArgs`] (the values at the kernel's
//! parameter offsets, with the pointer array CUDA reads) and [`ArgScratch`] (room to stage an
//! update).

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr::NonNull;
use std::sync::Arc;

use super::args::KernelArg;
use super::launch::{Kernel, ParamInfo};
use crate::memory::Allocation;

/// Kernel arguments packed at the kernel's parameter offsets, with the pointer array CUDA
/// reads (`kernelParams`). Updating an argument rewrites bytes in place: the pointers do not
/// change and nothing is allocated.
pub(crate) struct PackedArgs {
    /// The node's block of `2n + kernel.value_words` cells, in `chunk`: for `n` parameters,
    /// `n` cells of the `kernelParams` array (`ptr`), then `n` cells of the buffers the
    /// arguments refer to (`buffer`, one per parameter, owned), then the argument values
    /// (`word`s) the pointers point into. Every cell always holds the member of its region.
    ///
    /// Held raw so that the pointers of the `kernelParams` array, derived from it, stay valid
    /// for CUDA's reads while the values are rewritten: every access goes through this
    /// pointer, and no reference to the whole block is ever made (a `&mut` to it would
    /// invalidate them in Rust's aliasing model; Miri checks this in the tests).
    cells: NonNull<Cell>,
    /// The kernel the arguments are for (its parameter layout); a kernel node's kernel.
    kernel: Kernel,
    /// The chunk the block was carved from (see [`ArgArena`]), kept alive by the block.
    _chunk: Chunk,
}

/// Cells shared by the blocks carved from them, freed with the last block (and the arena, if
/// it still carves from it). A slot is an `UnsafeCell`: blocks write their own slots through
/// pointers derived from the shared chunk, and no two blocks share a slot.
type Chunk = Arc<[Slot]>;

/// A cell of a [`Chunk`], uninitialised until a block is carved over it.
#[repr(transparent)]
struct Slot(UnsafeCell<MaybeUninit<Cell>>);

/// Where a DAG's kernel nodes keep their arguments: blocks carved one after another from
/// shared chunks, so that adding a kernel node does not call the allocator (a chunk holds
/// the blocks of hundreds of nodes). A chunk is freed when the last block carved from it is
/// dropped and the arena has moved on; the room of a dropped block is not reused before.
///
/// Cloning gives an empty arena: a clone never carves from the chunk the original carves
/// from.
#[derive(Default)]
pub(crate) struct ArgArena {
    /// The chunk being carved, and how many of its cells are taken.
    current: Option<(Chunk, usize)>,
    /// Whether the next chunk is exactly as large as the block it is for (a block on its
    /// own, such as a clone's: no room kept for blocks that will not come).
    exact: bool,
}

impl Clone for ArgArena {
    fn clone(&self) -> Self {
        ArgArena::default()
    }
}

// SAFETY: the arena reads and writes no cell. It hands out ranges of its chunk that are
// disjoint, inside the chunk and never handed out twice (`take`, through `&mut self`), each
// then used only by the `PackedArgs` that owns it; a clone starts empty, so no two arenas hand
// out the same chunk. What it shares across threads is the chunk's reference count (atomic).
unsafe impl Send for ArgArena {}
// SAFETY: shared access to the arena touches no chunk at all (only `&mut self` takes cells).
unsafe impl Sync for ArgArena {}

impl ArgArena {
    /// The smallest and the largest chunk the arena allocates (in cells); each new chunk is
    /// twice the one before, so small DAGs stay small.
    const FIRST: usize = 64;
    const MOST: usize = 8192;

    /// An arena for one block, which gets a chunk of exactly its size.
    fn exact() -> ArgArena {
        ArgArena {
            current: None,
            exact: true,
        }
    }

    /// A chunk of `len` uninitialised cells.
    fn chunk(len: usize) -> Chunk {
        (0..len)
            .map(|_| Slot(UnsafeCell::new(MaybeUninit::uninit())))
            .collect()
    }

    /// `len` untaken cells, and the chunk they are in. A block larger than the largest chunk
    /// gets a chunk of its own.
    fn take(&mut self, len: usize) -> (NonNull<Cell>, Chunk) {
        let self_exact = self.exact;
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
                if len > next || self_exact {
                    (Self::chunk(len), 0)
                } else {
                    let chunk = Self::chunk(next);
                    *current = Some((chunk.clone(), len));
                    (chunk, 0)
                }
            }
        };
        (slots(&chunk, at, len), chunk)
    }
}

/// Cells `at..at + len` of `chunk` (a block: `len >= 1`), as a pointer that may write them.
///
/// # Panics
/// If they are not all inside the chunk (`take` never asks for such cells).
fn slots(chunk: &Chunk, at: usize, len: usize) -> NonNull<Cell> {
    assert!(
        len >= 1 && at < chunk.len() && len <= chunk.len() - at,
        "a block lies inside its chunk"
    );
    // No reference to the slots is made: the pointer comes from the chunk's own, and a `Slot`
    // is a transparent `UnsafeCell<MaybeUninit<Cell>>`, so it may write the cells although
    // the chunk is shared, and they have `Cell`'s layout.
    let first = Arc::as_ptr(chunk).cast::<Slot>().cast_mut();
    // SAFETY: `at` is inside the chunk (asserted).
    let p = unsafe { first.add(at) };
    // SAFETY: inside a live allocation, so not null.
    unsafe { NonNull::new_unchecked(p.cast::<Cell>()) }
}

/// A word of [`PackedArgs::cells`]: a pointer of the `kernelParams` array, a buffer slot or 8
/// bytes of argument values. `repr(C)` and pointer-sized (on the 64-bit targets CUDA
/// supports), every member at offset 0: the first cells are the `kernelParams` array CUDA
/// reads, the next ones an array of `Option<Arc<Allocation>>`.
#[repr(C)]
union Cell {
    word: u64,
    ptr: *mut c_void,
    buffer: ManuallyDrop<Option<Arc<Allocation>>>,
}

const _: () = {
    assert!(std::mem::size_of::<Cell>() == std::mem::size_of::<*mut c_void>());
    assert!(std::mem::size_of::<Cell>() == std::mem::size_of::<Option<Arc<Allocation>>>());
    assert!(std::mem::align_of::<Cell>() == std::mem::align_of::<Option<Arc<Allocation>>>());
};

const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Arc<Allocation>>();
    send_sync::<Kernel>();
};

// The block `cells` points to is owned by the value like a `Box`: no other block or arena uses
// its cells, its chunk is shared only for its (atomic) reference count, and the raw pointers in
// it point into it.
// SAFETY: as just said; the buffers (`Arc<Allocation>`) and kernel are `Send + Sync` (above).
unsafe impl Send for PackedArgs {}
// SAFETY: as above; every `&self` method only reads the cells (the array `kernel_params` gives
// is for CUDA to read), and all writes, guards included, take `&mut self`.
unsafe impl Sync for PackedArgs {}

impl PackedArgs {
    /// Packs `args`, which must already match `kernel`'s layout (one argument per parameter,
    /// of its size).
    ///
    /// # Panics
    /// If they do not (callers check them first), before anything is allocated.
    pub(crate) fn new(kernel: &Kernel, args: &[KernelArg]) -> Self {
        PackedArgs::new_in(&mut ArgArena::exact(), kernel, args)
    }

    /// [`PackedArgs::new`], the block carved from `arena`.
    pub(crate) fn new_in(arena: &mut ArgArena, kernel: &Kernel, args: &[KernelArg]) -> Self {
        let params = &kernel.inner.params;
        let n = params.len();
        assert_eq!(args.len(), n, "one argument per parameter");
        for (i, (a, p)) in args.iter().zip(params).enumerate() {
            assert_eq!(a.size(), p.size, "parameter {i} size");
        }
        // Not dropped (which reads the buffer cells) until every cell is written: a panic
        // before that would leak the block, not drop uninitialised cells.
        let packed = ManuallyDrop::new(PackedArgs::alloc(arena, kernel.clone()));
        let base = packed.base();
        let values = packed.storage_ptr();
        for w in 0..packed.words() {
            // SAFETY: value cells `2n..len` are inside the block (`alloc`); a `Copy` member
            // is written over uninitialised memory. Zeroed first: padding between values is
            // then initialised too.
            unsafe { base.add(2 * n + w).write(Cell { word: 0 }) };
        }
        for (i, (a, p)) in args.iter().zip(params).enumerate() {
            // SAFETY: cells `i`, `n + i` (`i < n`): pointer and buffer cells, written once over
            // uninitialised memory; `p.size` bytes at `p.offset` lie inside the values (`alloc`),
            // and `a`'s bytes (that long, checked above) are borrowed, not in the block.
            unsafe {
                base.add(i).write(Cell {
                    ptr: values.add(p.offset).cast(),
                });
                base.add(n + i).write(Cell {
                    buffer: ManuallyDrop::new(a.buffer.cloned()),
                });
                copy_value(a.as_bytes().as_ptr(), values.add(p.offset), p.size);
            }
        }
        ManuallyDrop::into_inner(packed)
    }

    /// The kernel the arguments are for.
    pub(crate) fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// A block of uninitialised cells laid out for `kernel` (`2n` pointer and buffer cells,
    /// then the value words), carved from `arena`, owned by the result. The callers hold it
    /// in a `ManuallyDrop` until they have written every cell.
    fn alloc(arena: &mut ArgArena, kernel: Kernel) -> Self {
        // At least one value cell, so the values' start is inside the block.
        assert!(kernel.inner.value_words >= 1, "at least one value cell");
        let (cells, chunk) = arena.take(block_len(&kernel));
        PackedArgs {
            cells,
            kernel,
            _chunk: chunk,
        }
    }

    /// The first cell; every access to the cells is made from this pointer.
    fn base(&self) -> *mut Cell {
        self.cells.as_ptr()
    }

    /// The first byte of the argument values (after the pointer array and the buffers).
    fn storage_ptr(&self) -> *mut u8 {
        let n = self.kernel.inner.params.len();
        // SAFETY: the block has `2n` pointer and buffer cells and at least one value cell
        // after them (`alloc` made it so).
        unsafe { self.base().add(2 * n) }.cast()
    }

    /// A guard that points the `kernelParams` cells at the values when dropped (it writes
    /// them, so it borrows the arguments mutably).
    fn point_back(&mut self) -> PointBack<'_> {
        PointBack {
            base: self.base(),
            values: self.storage_ptr(),
            params: &self.kernel.inner.params,
        }
    }

    /// Number of value cells.
    fn words(&self) -> usize {
        self.kernel.inner.value_words
    }

    /// The argument values, as bytes (whole words).
    fn storage_bytes(&self) -> &[u8] {
        // SAFETY: the value cells hold `word`s (zeroed, then written bytewise), which have no
        // padding; `u8` has no alignment or validity requirement; borrowed with `self` (values
        // are only written through `&mut self`).
        unsafe { std::slice::from_raw_parts(self.storage_ptr(), self.words() * 8) }
    }

    /// The buffers the arguments refer to, one slot per parameter.
    pub(crate) fn buffers(&self) -> &[Option<Arc<Allocation>>] {
        let n = self.kernel.inner.params.len();
        // SAFETY: cells `n..2n` hold the `buffer` member (offset 0 of the `repr(C)` union; a
        // `repr(transparent)` `ManuallyDrop<Option<Arc<Allocation>>>` of the cell's size and
        // alignment, asserted above), borrowed with `self` (only `&mut self` writes them).
        unsafe { std::slice::from_raw_parts(self.base().add(n).cast(), n) }
    }

    /// The buffer slot of parameter `i`.
    fn buffer_mut(&mut self, i: usize) -> &mut Option<Arc<Allocation>> {
        let n = self.kernel.inner.params.len();
        assert!(i < n, "parameter {i} of {n}");
        // SAFETY: cell `n + i` (`i < n`) is a buffer cell, which holds the `buffer` member
        // (see `buffers`); borrowed mutably with `self`. Only that cell is borrowed, not the
        // pointers or values.
        unsafe { &mut (*self.base().add(n + i)).buffer }
    }

    /// Writes argument `i` (already checked against parameter `i`). Returns the buffer it
    /// replaced, if any.
    pub(crate) fn set(&mut self, i: usize, a: &KernelArg) -> Option<Arc<Allocation>> {
        let info = self.kernel.inner.params[i];
        // The same buffer again (the common case when updating a value next to it): no
        // reference-count traffic.
        let same = match (&self.buffers()[i], &a.buffer) {
            (Some(old), Some(new)) => Arc::ptr_eq(old, new),
            (None, None) => true,
            _ => false,
        };
        let bytes = a.as_bytes();
        assert_eq!(bytes.len(), info.size, "parameter {i} size");
        self.write_param(info, bytes);
        if same {
            return None;
        }
        std::mem::replace(self.buffer_mut(i), a.buffer.cloned())
    }

    /// [`PackedArgs::update_in_place`] for argument `i` alone: passes the arguments with
    /// `a` as parameter `i` to `set` if `a` fits in place (see [`PackedArgs::fits_in_place`]),
    /// and keeps it if `set` succeeds; `None`, with nothing called and nothing changed, if it
    /// does not fit or the kernel has no parameter `i`.
    ///
    /// While `set` runs, the array's pointer for parameter `i` points at `a`'s bytes, where
    /// they are; afterwards, whether `set` returns or unwinds, it points at the node's value
    /// again, with `a`'s bytes written in only if `set` succeeded. Nothing is copied before
    /// the call and nothing is allocated.
    pub(crate) fn update_one_in_place<R, E>(
        &mut self,
        i: usize,
        a: &KernelArg<'_>,
        set: impl FnOnce(*mut *mut c_void) -> Result<R, E>,
    ) -> Option<Result<R, E>> {
        let params = &self.kernel.inner.params[..];
        let p = params.get(i)?;
        if !fits(a, p, &self.buffers()[i]) {
            return None;
        }
        let base = self.base();
        // Points cell `i` back at the value when dropped: on every way out from here.
        let back = PointBack {
            // SAFETY: cell `i` (`i < n`: the lookup above) is inside the block.
            base: unsafe { base.add(i) },
            values: self.storage_ptr(),
            params: &params[i..=i],
        };
        // SAFETY: cell `i` is the array's pointer for parameter `i`; a `Copy` member, so
        // nothing is dropped. The cells are written through `base` alone.
        unsafe { base.add(i).write(Cell { ptr: a.as_ptr() }) };
        let r = set(base.cast());
        if r.is_ok() {
            // SAFETY: the parameter occupies `p.size` bytes at `p.offset` inside the values;
            // `a` is that long (`fits`) and borrowed, not in the block.
            unsafe { copy_value(a.as_bytes().as_ptr(), back.values.add(p.offset), p.size) };
        }
        drop(back);
        Some(r)
    }

    /// Whether `args` fit in place: one per parameter, each inline and of its parameter's
    /// size, leaving every buffer slot as it is (each buffer argument is of the buffer its
    /// parameter has, any region of it; each value replaces a value). Writing their bytes is
    /// then the whole update.
    pub(crate) fn fits_in_place(&self, args: &[KernelArg<'_>]) -> bool {
        let params = &self.kernel.inner.params;
        args.len() == params.len()
            && args
                .iter()
                .zip(params.iter().zip(self.buffers()))
                .all(|(a, (p, cur))| fits(a, p, cur))
    }

    /// Passes `args` to `set` as the kernel's parameters if they fit in place (see
    /// [`PackedArgs::fits_in_place`]), and keeps them if `set` succeeds; `None`, with nothing
    /// called and nothing changed, if they do not fit.
    ///
    /// Nothing is copied before the call: while `set` runs, the `kernelParams` array it is
    /// given points at the arguments' own bytes (an inline value is 8-byte aligned), borrowed
    /// for the call. Afterwards, whether `set` returns or unwinds, the array points at the
    /// node's values again, with the new ones written in only if `set` succeeded: a refused
    /// update leaves the node as CUDA still has it. Nothing is allocated.
    pub(crate) fn update_in_place<R, E>(
        &mut self,
        args: &[KernelArg<'_>],
        set: impl FnOnce(*mut *mut c_void) -> Result<R, E>,
    ) -> Option<Result<R, E>> {
        let n = self.kernel.inner.params.len();
        if args.len() != n {
            return None;
        }
        // Points the array back at the values when dropped: on every way out from here.
        let back = self.point_back();
        let (base, params) = (back.base, back.params);
        for (i, (a, p)) in args.iter().zip(params).enumerate() {
            // SAFETY: cell `n + i` (`i < n`) is a buffer cell, which holds the `buffer`
            // member; read only, and no reference to it outlives this statement's use.
            let cur = unsafe { &*(*base.add(n + i)).buffer };
            if !fits(a, p, cur) {
                return None;
            }
            // SAFETY: cell `i` is the array's pointer for parameter `i`; a `Copy` member, so
            // nothing is dropped. The cells are written through `base` alone.
            unsafe { base.add(i).write(Cell { ptr: a.as_ptr() }) };
        }
        let r = set(base.cast());
        if r.is_ok() {
            for (a, p) in args.iter().zip(params) {
                // SAFETY: the parameter occupies `p.size` bytes at `p.offset` inside the
                // values; `a` is that long (`fits`) and borrowed, not in the block.
                unsafe { copy_value(a.as_bytes().as_ptr(), back.values.add(p.offset), p.size) };
            }
        }
        drop(back);
        Some(r)
    }

    /// Overwrites parameter `i` with `bytes` (exactly its size), without touching buffers.
    pub(crate) fn set_bytes(&mut self, i: usize, bytes: &[u8]) {
        let info = self.kernel.inner.params[i];
        assert_eq!(bytes.len(), info.size, "parameter {i} size");
        self.write_param(info, bytes);
    }

    /// Writes `bytes` (exactly `info.size` long, checked by the callers) as the value of the
    /// parameter `info` describes.
    #[inline]
    fn write_param(&mut self, info: ParamInfo, bytes: &[u8]) {
        debug_assert_eq!(bytes.len(), info.size);
        // SAFETY: the parameter occupies `info.size` bytes at `info.offset` inside the values
        // (sized for the layout); `bytes` is that long and borrowed, so it is not inside
        // `self`'s cells, borrowed mutably here.
        unsafe {
            copy_value(
                bytes.as_ptr(),
                self.storage_ptr().add(info.offset),
                info.size,
            )
        };
    }

    /// A copy of the packed arguments in `scratch`, with `replace(i)`'s bytes (exactly
    /// parameter `i`'s size) instead of argument `i` where it gives some; returns the
    /// `kernelParams` array pointing into `scratch`. Allocates only when `scratch` grows.
    pub(crate) fn staged<'r>(
        &self,
        scratch: &mut ArgScratch,
        replace: &dyn Fn(usize) -> Option<&'r [u8]>,
    ) -> *mut *mut c_void {
        let values = self.storage_bytes();
        scratch.storage.clear();
        scratch.storage.resize(values.len() / 8, 0);
        let base = scratch.storage.as_mut_ptr().cast::<u8>();
        // SAFETY: the scratch has room for exactly the values' bytes; the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), base, values.len()) };
        scratch.ptrs.clear();
        for (i, info) in self.kernel.inner.params.iter().enumerate() {
            // SAFETY: every offset is inside the copy of `storage`, sized for the layout.
            let p = unsafe { base.add(info.offset) };
            if let Some(bytes) = replace(i) {
                assert_eq!(bytes.len(), info.size, "parameter {i} size");
                // SAFETY: parameter `i` occupies `info.size` bytes at `p`.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, info.size) };
            }
            scratch.ptrs.push(p.cast());
        }
        scratch.ptrs.as_mut_ptr()
    }

    /// Calls `f` with the `kernelParams` array of these arguments with `args` (inline values,
    /// checked against the layout) instead of theirs: during the call the array's pointers
    /// for `args` point at their bytes, where they are (CUDA reads them during the call the
    /// array is for, while `args` are borrowed); afterwards, whether `f` returns or unwinds,
    /// they point at the node's own values again. No argument byte is copied, nothing is
    /// allocated and the values do not change.
    ///
    /// # Panics
    /// If an argument is not inline or not of its parameter's size (callers check both).
    pub(crate) fn with_inline_args<'a, R>(
        &mut self,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
        f: impl FnOnce(*mut *mut c_void) -> R,
    ) -> R {
        // Points the array back at the values when dropped, also if `f` unwinds.
        let back = self.point_back();
        for (i, a) in args {
            assert!(a.is_inline(), "parameter {i}: not an inline value");
            assert_eq!(a.size(), back.params[i].size, "parameter {i} size");
            // SAFETY: cell `i` is the array's pointer for parameter `i` (`i < len()`, as the
            // layout lookup above checked); a `Copy` member: nothing is dropped.
            unsafe { back.base.add(i).write(Cell { ptr: a.as_ptr() }) };
        }
        // The array is the first cells (see `kernel_params`).
        f(back.base.cast())
    }

    /// The `kernelParams` array.
    pub(crate) fn kernel_params(&self) -> *mut *mut c_void {
        // `Cell` is `repr(C)` and pointer-sized: the first cells are an array of pointers.
        self.base().cast::<*mut c_void>()
    }

    /// Bytes of parameter `i`.
    pub(crate) fn param_bytes(&self, i: usize) -> &[u8] {
        let info = self.kernel.inner.params[i];
        &self.storage_bytes()[info.offset..info.offset + info.size]
    }

    pub(crate) fn len(&self) -> usize {
        self.kernel.inner.params.len()
    }
}

/// Whether `a` fits in place as the argument of parameter `p`, whose buffer slot is `cur`: see
/// [`PackedArgs::fits_in_place`].
#[inline]
fn fits(a: &KernelArg<'_>, p: &ParamInfo, cur: &Option<Arc<Allocation>>) -> bool {
    // The same buffer, or none on both sides: equal addresses of the shared allocations (null
    // for none), one comparison.
    let addr = |b: Option<&Arc<Allocation>>| b.map_or(std::ptr::null(), Arc::as_ptr);
    a.is_inline() && a.size() == p.size && addr(a.buffer) == addr(cur.as_ref())
}

/// Points the `kernelParams` cells of a block (`base`, its values at `values`, laid out by
/// `params`) at the values when dropped: after a call for which they pointed elsewhere, also
/// when it unwinds.
struct PointBack<'p> {
    base: *mut Cell,
    values: *mut u8,
    params: &'p [ParamInfo],
}

impl Drop for PointBack<'_> {
    fn drop(&mut self) {
        for (i, info) in self.params.iter().enumerate() {
            // SAFETY: `base`, `values` are one block laid out by `params` (`point_back` takes
            // them from one `PackedArgs`): cell `i` is a pointer cell (a `Copy` member, nothing
            // dropped) and every offset lies inside the values.
            unsafe {
                self.base.add(i).write(Cell {
                    ptr: self.values.add(info.offset).cast(),
                })
            };
        }
    }
}

impl Clone for PackedArgs {
    fn clone(&self) -> Self {
        let n = self.kernel.inner.params.len();
        // As in `new`: not dropped until every cell is written.
        let c = ManuallyDrop::new(PackedArgs::alloc(
            &mut ArgArena::exact(),
            self.kernel.clone(),
        ));
        let (from, to) = (self.base(), c.base());
        for w in 2 * n..block_len(&self.kernel) {
            // SAFETY: both blocks have `block_len` cells (the same kernel's layout); value cells
            // hold `word`s, copied over the clone's uninitialised ones (a `Copy` member).
            unsafe {
                to.add(w).write(Cell {
                    word: (*from.add(w)).word,
                })
            };
        }
        let values = c.storage_ptr();
        for (i, (p, b)) in self
            .kernel
            .inner
            .params
            .iter()
            .zip(self.buffers())
            .enumerate()
        {
            // SAFETY: cells `i` and `n + i` (`i < n`) of the clone's block, written once over
            // uninitialised memory; its pointers point at its own values (the offset is inside
            // them), its buffers are new references to this block's.
            unsafe {
                to.add(i).write(Cell {
                    ptr: values.add(p.offset).cast(),
                });
                to.add(n + i).write(Cell {
                    buffer: ManuallyDrop::new(b.clone()),
                });
            }
        }
        ManuallyDrop::into_inner(c)
    }
}

impl Drop for PackedArgs {
    fn drop(&mut self) {
        let n = self.kernel.inner.params.len();
        for i in 0..n {
            // SAFETY: buffer cells hold the `buffer` member (see `buffers`), each dropped
            // once, here; the cells are not used afterwards (their memory is freed next).
            unsafe { ManuallyDrop::drop(&mut (*self.base().add(n + i)).buffer) };
        }
        // The chunk is let go of next (a field): freed if this was its last block. Its cells
        // have no drop glue.
    }
}

/// The cells of a block laid out for `kernel`.
fn block_len(kernel: &Kernel) -> usize {
    2 * kernel.inner.params.len() + kernel.inner.value_words
}

/// Copies `n` bytes from `src` to `dst`. The sizes of scalars and pointers are copied with
/// one load and one store (a `copy_nonoverlapping` whose length is known only at run time is
/// a call to `memcpy`, a good part of a per-node update's cost).
///
/// # Safety
/// As for [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `n` bytes
/// (no alignment needed), the two not overlapping.
#[inline]
unsafe fn copy_value(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (all arms): the caller's contract, for exactly `n` bytes; unaligned accesses.
    unsafe {
        match n {
            4 => dst
                .cast::<u32>()
                .write_unaligned(src.cast::<u32>().read_unaligned()),
            8 => dst
                .cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned()),
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// Room to stage kernel parameters for an update before the node's own copy changes (so a
/// refused update leaves the node as CUDA still has it).
#[derive(Default)]
pub(crate) struct ArgScratch {
    storage: Vec<u64>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the pointers point into `storage`, owned by the same value, or into arguments borrowed
// for the one call they are staged for; they are only written and read through `&mut self`.
unsafe impl Send for ArgScratch {}

#[cfg(test)]
impl PackedArgs {
    /// The chunk the block was carved from.
    fn chunk(&self) -> &Chunk {
        &self._chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_one_arena_share_chunks_and_the_last_one_out_frees_each() {
        let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
        let x = rec.device_buffer::<f32>(16);
        let k = rec.kernel("k", &[8, 4]);
        let len = block_len(&k);
        let mut arena = ArgArena::default();
        let mut a = PackedArgs::new_in(&mut arena, &k, &crate::args![&x, 1u32]);
        let b = PackedArgs::new_in(&mut arena, &k, &crate::args![&x, 2u32]);
        assert!(Arc::ptr_eq(a.chunk(), b.chunk()), "one chunk");
        assert_eq!(a.chunk().len(), ArgArena::FIRST);
        // SAFETY (test): `len` cells on from `a`'s block are inside the chunk.
        assert_eq!(
            b.base(),
            unsafe { a.base().add(len) },
            "blocks side by side"
        );
        // Writing one block leaves its neighbour alone.
        a.set(1, &KernelArg::from(7u32));
        assert_eq!(a.param_bytes(1), 7u32.to_ne_bytes());
        assert_eq!(b.param_bytes(1), 2u32.to_ne_bytes());
        assert_eq!(b.param_bytes(0), x.alloc.ptr.to_ne_bytes());
        // Filling the first chunk moves on to one twice as large.
        let more: Vec<PackedArgs> = (0..ArgArena::FIRST / len)
            .map(|i| PackedArgs::new_in(&mut arena, &k, &crate::args![&x, i as u32]))
            .collect();
        let last = more.last().expect("some");
        assert!(!Arc::ptr_eq(a.chunk(), last.chunk()), "a new chunk");
        assert_eq!(last.chunk().len(), 2 * ArgArena::FIRST);
        for (i, p) in more.iter().enumerate() {
            assert_eq!(p.param_bytes(1), (i as u32).to_ne_bytes(), "block {i} kept");
        }
        // The first chunk lives as long as a block of it does; the arena moved on.
        let first = Arc::downgrade(a.chunk());
        let firsts: Vec<_> = more
            .into_iter()
            .filter(|p| Arc::ptr_eq(p.chunk(), a.chunk()))
            .collect();
        drop(a);
        assert!(first.upgrade().is_some(), "`b` still holds it");
        drop((b, firsts));
        assert!(first.upgrade().is_none(), "freed with its last block");
        // The buffers the blocks held were given back (one reference left: `x`'s own).
        assert_eq!(Arc::strong_count(&x.alloc), 1);
        // The current chunk is freed with the arena once its blocks are gone.
        let current = Arc::downgrade(&arena.current.as_ref().expect("a chunk").0);
        drop(arena);
        assert!(current.upgrade().is_none());
    }

    #[test]
    fn blocks_fill_a_chunk_to_its_last_cell_and_never_past_it() {
        let rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
        // 8 cells a block: 8 blocks fill the first chunk (64 cells) exactly.
        let eight = rec.kernel("k", &[4, 4, 4]);
        assert_eq!(block_len(&eight), 8);
        let mut arena = ArgArena::default();
        let v: Vec<_> = (0..20u32)
            .map(|i| PackedArgs::new_in(&mut arena, &eight, &crate::args![i, i, i]))
            .collect();
        assert!(Arc::ptr_eq(v[0].chunk(), v[7].chunk()), "exactly full");
        assert!(!Arc::ptr_eq(v[7].chunk(), v[8].chunk()));
        // 5 cells a block: the 13th would end one cell past the first chunk (Miri reports an
        // out-of-bounds write if it did).
        let five = rec.kernel("k", &[4, 4]);
        assert_eq!(block_len(&five), 5);
        let mut arena = ArgArena::default();
        let w: Vec<_> = (0..13u32)
            .map(|i| PackedArgs::new_in(&mut arena, &five, &crate::args![i, i]))
            .collect();
        assert!(Arc::ptr_eq(w[0].chunk(), w[11].chunk()));
        assert!(
            !Arc::ptr_eq(w[11].chunk(), w[12].chunk()),
            "the 13th does not fit"
        );
        for (i, p) in v.iter().enumerate() {
            assert_eq!(p.param_bytes(2), (i as u32).to_ne_bytes(), "block {i} kept");
        }
        for (i, p) in w.iter().enumerate() {
            assert_eq!(p.param_bytes(1), (i as u32).to_ne_bytes(), "block {i} kept");
        }
    }

    #[test]
    #[should_panic(expected = "a block lies inside its chunk")]
    fn cells_past_a_chunk_are_never_handed_out() {
        let chunk = ArgArena::chunk(8);
        let _ = slots(&chunk, 4, 5);
    }

    #[test]
    fn removed_nodes_and_copies_of_a_dag_work_on_other_threads() {
        use crate::dag::{Dag, Op};
        let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
        let x = rec.device_buffer::<f32>(16);
        let k = rec.kernel("k", &[8, 4]);
        let cfg = crate::LaunchConfig::new(1, 32);
        let mut dag = Dag::new();
        let ids: Vec<_> = (0..4u32)
            .map(|i| dag.add_kernel(&k, cfg, &crate::args![&x, i]).unwrap())
            .collect();
        // A removed node and a copy of the DAG share chunks with it, or did.
        let mut removed = dag.remove(ids[1]).unwrap();
        let mut copy = dag.clone();
        let k2 = k.clone();
        let t = std::thread::spawn(move || {
            let Op::Kernel(kn) = &mut removed.op else {
                panic!("a kernel node")
            };
            for j in 0..10u32 {
                kn.args.set(1, &KernelArg::from(j));
                let r = kn
                    .args
                    .update_one_in_place(1, &KernelArg::from(j + 100), |p| {
                        // SAFETY: the array has two pointers, the second to a `u32`.
                        Ok::<_, ()>(unsafe { *(*p.add(1)).cast::<u32>() })
                    });
                assert_eq!(r, Some(Ok(j + 100)));
            }
            assert_eq!(kn.arg_bytes(1), 109u32.to_ne_bytes());
            for j in 0..10u32 {
                copy.add_kernel(&k2, cfg, &crate::args![0u64, j]).unwrap();
            }
            drop(removed);
            copy
        });
        for j in 0..30u32 {
            dag.add_kernel(&k, cfg, &crate::args![&x, j]).unwrap();
            dag.set_kernel_args(ids[2], &crate::args![&x, j]).unwrap();
        }
        let copy = t.join().unwrap();
        assert_eq!(copy.node_count(), 13);
        drop((dag, copy));
        assert_eq!(Arc::strong_count(&x.alloc), 1, "every reference given back");
    }

    #[test]
    fn a_block_larger_than_a_chunk_gets_one_of_its_own_and_clones_their_own() {
        let rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
        let sizes = vec![8usize; ArgArena::MOST / 2];
        let big = rec.kernel("big", &sizes);
        let small = rec.kernel("small", &[4]);
        let mut arena = ArgArena::default();
        let s = PackedArgs::new_in(&mut arena, &small, &crate::args![1u32]);
        let args: Vec<KernelArg> = (0..sizes.len() as u64).map(KernelArg::from).collect();
        let b = PackedArgs::new_in(&mut arena, &big, &args);
        assert!(b.chunk().len() >= block_len(&big) && block_len(&big) > ArgArena::MOST);
        assert!(!Arc::ptr_eq(s.chunk(), b.chunk()));
        assert_eq!(b.param_bytes(4000), 4000u64.to_ne_bytes());
        // The arena still carves from the chunk it had.
        let s2 = PackedArgs::new_in(&mut arena, &small, &crate::args![2u32]);
        assert!(Arc::ptr_eq(s.chunk(), s2.chunk()));
        // A clone has a block of its own, of its own chunk of its size, and the same bytes.
        let c = s2.clone();
        assert!(!Arc::ptr_eq(c.chunk(), s2.chunk()));
        assert_eq!(c.chunk().len(), block_len(&small));
        assert_eq!(c.param_bytes(0), 2u32.to_ne_bytes());
        // A cloned arena carves elsewhere.
        let mut copy = arena.clone();
        let s3 = PackedArgs::new_in(&mut copy, &small, &crate::args![3u32]);
        assert!(!Arc::ptr_eq(s3.chunk(), s2.chunk()));
        assert_eq!(s2.param_bytes(0), 2u32.to_ne_bytes());
    }

    #[test]
    fn mismatched_arguments_panic_before_anything_is_held() {
        let mut rec = crate::dag::RecordingBackend::new(crate::device::DeviceLimits::hopper());
        let x = rec.device_buffer::<f32>(16);
        let k = rec.kernel("k", &[8, 4]);
        // Too few arguments; an argument of the wrong size after a buffer.
        for bad in [crate::args![&x].to_vec(), crate::args![&x, 1u64].to_vec()] {
            let buffer = bad[0].buffer.expect("a buffer argument");
            let held = Arc::strong_count(buffer);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                PackedArgs::new(&k, &bad)
            }));
            assert!(r.is_err(), "mismatched arguments must panic");
            assert_eq!(
                Arc::strong_count(buffer),
                held,
                "no reference to the buffer is taken (and leaked) before the panic"
            );
        }
        let ok = crate::args![&x, 2.0f32];
        let p = PackedArgs::new(&k, &ok);
        assert_eq!(p.words(), 2, "values end at byte 12: two words");
        assert_eq!(p.param_bytes(1), &2.0f32.to_ne_bytes());
        assert_eq!(
            &p.storage_bytes()[12..],
            &[0; 4],
            "padding after the values is zeroed"
        );
    }

    #[test]
    fn values_pack_at_parameter_offsets() {
        let k = Kernel::recording("k", &[4, 8, 2], 1);
        assert_eq!(
            k.params(),
            &[
                ParamInfo { offset: 0, size: 4 },
                ParamInfo { offset: 8, size: 8 },
                ParamInfo {
                    offset: 16,
                    size: 2
                }
            ]
        );
        let args = crate::args![1.5f32, 7u64, 3u16];
        k.check_args(&args).unwrap();
        let mut p = PackedArgs::new(&k, &args);
        assert_eq!(p.param_bytes(0), &1.5f32.to_ne_bytes());
        assert_eq!(p.param_bytes(1), &7u64.to_ne_bytes());
        let ptrs_before = p.kernel_params();
        p.set(1, &KernelArg::from(9u64));
        assert_eq!(p.param_bytes(1), &9u64.to_ne_bytes());
        assert_eq!(
            p.kernel_params(),
            ptrs_before,
            "update must not move the pointer array"
        );
        let c = p.clone();
        assert_eq!(c.param_bytes(1), &9u64.to_ne_bytes());
        // SAFETY: reading the first pointer of the clone's own array.
        let first = unsafe { *c.kernel_params() };
        assert_eq!(first as *const u8, c.param_bytes(0).as_ptr());
    }

    #[test]
    fn the_pointer_array_reads_the_current_values_after_updates() {
        // What CUDA does with `kernelParams`: read each argument through its pointer. The
        // pointers are made once; every later write (set, swap, update in place, inline call)
        // must leave them valid for reading the values as they are now (Miri checks the
        // aliasing model: `cargo +nightly miri test --lib kernel::packed`).
        let k = Kernel::recording("k", &[4, 8], 1);
        let args = crate::args![1.5f32, 7u64];
        k.check_args(&args).unwrap();
        let mut p = PackedArgs::new(&k, &args);
        let read = |p: &PackedArgs| -> (f32, u64) {
            let ptrs = p.kernel_params();
            // SAFETY: one pointer per parameter, each at its value (4 and 8 bytes, aligned:
            // the values start on a cell and the offsets are the parameters' alignments).
            unsafe { (*(*ptrs).cast::<f32>(), *(*ptrs.add(1)).cast::<u64>()) }
        };
        assert_eq!(read(&p), (1.5, 7));
        p.set(1, &KernelArg::from(9u64));
        assert_eq!(read(&p), (1.5, 9));
        let two = KernelArg::from(2.5f32);
        let seen = p.update_one_in_place(0, &two, |ptrs| {
            // SAFETY: CUDA's view during the call: one pointer per parameter.
            Err::<(), _>(unsafe { (*(*ptrs).cast::<f32>(), *(*ptrs.add(1)).cast::<u64>()) })
        });
        assert_eq!(seen, Some(Err((2.5, 9))), "the call saw the new value");
        assert_eq!(read(&p), (1.5, 9), "and a refusal kept the old one");
        p.set_bytes(0, &2.5f32.to_ne_bytes());
        assert_eq!(read(&p), (2.5, 9));
        p.set_bytes(0, &1.5f32.to_ne_bytes());
        assert_eq!(read(&p), (1.5, 9));
        let refused = p.update_in_place(&crate::args![3.5f32, 11u64], |_| Err::<(), ()>(()));
        assert_eq!(refused, Some(Err(())));
        assert_eq!(read(&p), (1.5, 9));
        let done = p.update_in_place(&crate::args![4.5f32, 12u64], |_| Ok::<_, ()>(()));
        assert_eq!(done, Some(Ok(())));
        assert_eq!(read(&p), (4.5, 12));
        let eight = KernelArg::from(8u64);
        p.with_inline_args(std::iter::once((1, &eight)), |_| ());
        assert_eq!(read(&p), (4.5, 12));
        let _ = p.buffer_mut(0);
        assert_eq!(read(&p), (4.5, 12));
    }

    #[test]
    fn buffers_are_held_once_per_copy_and_released_when_replaced_or_dropped() {
        let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
        let a = rec.device_buffer::<f32>(64);
        let b = rec.device_buffer::<f32>(64);
        let count = |buf: &crate::DeviceBuffer<f32>| Arc::strong_count(&buf.alloc);
        let (a0, b0) = (count(&a), count(&b));
        let k = Kernel::recording("k", &[8, 4, 8], 1);
        let args = crate::args![&a, 3u32, &a];
        let mut p = PackedArgs::new(&k, &args);
        drop(args);
        assert_eq!(count(&a), a0 + 2, "one reference per argument slot");
        assert!(p.buffers()[1].is_none());
        let c = p.clone();
        assert_eq!(count(&a), a0 + 4, "the clone holds its own references");
        let old = p.set(2, &KernelArg::from(&b));
        assert!(old.is_some_and(|o| Arc::ptr_eq(&o, &a.alloc)));
        assert_eq!(
            count(&a),
            a0 + 3,
            "the replaced buffer is given back (and dropped)"
        );
        assert_eq!(count(&b), b0 + 1);
        assert_eq!(p.param_bytes(2), &b.alloc.ptr.to_ne_bytes());
        assert_eq!(
            c.param_bytes(2),
            &a.alloc.ptr.to_ne_bytes(),
            "the clone is apart"
        );
        drop(p);
        assert_eq!(
            (count(&a), count(&b)),
            (a0 + 2, b0),
            "dropping releases every slot"
        );
        drop(c);
        assert_eq!(count(&a), a0);
    }

    #[test]
    fn inline_arguments_are_pointed_to_for_the_call_only() {
        let k = Kernel::recording("k", &[4, 8], 1);
        let args = crate::args![1.5f32, 7u64];
        k.check_args(&args).unwrap();
        let mut p = PackedArgs::new(&k, &args);
        let own = |p: &PackedArgs| -> Vec<*mut c_void> {
            // SAFETY: the array has one pointer per parameter.
            unsafe { std::slice::from_raw_parts(p.kernel_params(), p.len()) }.to_vec()
        };
        let before = own(&p);
        let nine = KernelArg::from(9u64);
        let (p0, p1) = p.with_inline_args(std::iter::once((1, &nine)), |ptrs| {
            // SAFETY: `ptrs` has one entry per parameter, each pointing at its value (the
            // node's own, or `nine`'s, alive here; an inline value is 8-byte aligned).
            unsafe {
                assert_eq!(*(*ptrs.add(1)).cast::<u64>(), 9);
                (*ptrs, *ptrs.add(1))
            }
        });
        assert_eq!(p0, before[0], "other parameters point at the node's values");
        assert_eq!(p1, nine.as_ptr(), "no copy of an inline value");
        assert_eq!(
            own(&p),
            before,
            "the array points at the node's values again"
        );
        assert_eq!(
            p.param_bytes(1),
            &7u64.to_ne_bytes(),
            "the node is unchanged"
        );
        // Also when the call unwinds.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.with_inline_args(std::iter::once((0, &KernelArg::from(2.5f32))), |_| {
                panic!("in the call")
            })
        }));
        assert!(r.is_err());
        assert_eq!(own(&p), before, "restored after a panic too");
    }

    #[test]
    fn an_update_in_place_points_cuda_at_the_arguments_and_keeps_them_only_when_accepted() {
        let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
        let (a, b) = (rec.device_buffer::<u32>(8), rec.device_buffer::<u32>(8));
        let k = Kernel::recording("k", &[8, 4], 1);
        let mut p = PackedArgs::new(&k, &crate::args![&a, 7u32]);
        let own = |p: &PackedArgs| -> Vec<*mut c_void> {
            // SAFETY: the array has one pointer per parameter.
            unsafe { std::slice::from_raw_parts(p.kernel_params(), p.len()) }.to_vec()
        };
        let before = own(&p);
        let count = Arc::strong_count(&a.alloc);
        // CUDA reads the caller's bytes, where they are; the node takes them once accepted.
        let new = crate::args![&a, 9u32];
        let seen = p.update_in_place(&new, |ptrs| {
            // SAFETY: one pointer per parameter; the second at a `u32` (an inline value).
            Ok::<_, ()>(unsafe { (*ptrs.add(1), *(*ptrs.add(1)).cast::<u32>()) })
        });
        assert_eq!(
            seen,
            Some(Ok((new[1].as_ptr(), 9))),
            "no copy before the call"
        );
        assert_eq!(p.param_bytes(1), &9u32.to_ne_bytes());
        assert_eq!(
            own(&p),
            before,
            "the array points at the node's values again"
        );
        assert_eq!(
            Arc::strong_count(&a.alloc),
            count,
            "the same buffer: no reference taken"
        );
        // A refusal, a panic in the call, or an argument that does not fit (here the second,
        // after the first was pointed to) leave the node as it was.
        let refused = p.update_in_place(&crate::args![&a, 10u32], |_| Err::<(), ()>(()));
        assert_eq!(refused, Some(Err(())));
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.update_in_place(&crate::args![&a, 11u32], |_| -> Result<(), ()> {
                panic!("in the call")
            })
        }));
        assert!(r.is_err());
        for other in [
            crate::args![&a, 12u64],
            crate::args![&b, 12u32],
            crate::args![0u64, 12u32],
        ] {
            let r = p.update_in_place(&other, |_| -> Result<(), ()> { panic!("CUDA called") });
            assert!(r.is_none());
        }
        assert!(p
            .update_in_place(&crate::args![&a], |_| Ok::<_, ()>(()))
            .is_none());
        assert_eq!(p.param_bytes(1), &9u32.to_ne_bytes());
        assert_eq!(own(&p), before);
    }

    #[test]
    fn staged_arguments_copy_big_ones_into_the_scratch() {
        let k = Kernel::recording("k", &[4, 8, 100], 1);
        let args = crate::args![1.5f32, 7u64, [3u8; 100]];
        k.check_args(&args).unwrap();
        let p = PackedArgs::new(&k, &args);
        let mut scratch = ArgScratch::default();
        // A value kept on the heap is copied with the rest, in the scratch.
        let big = KernelArg::from([5u8; 100]);
        let ptrs = p.staged(&mut scratch, &|i| (i == 2).then(|| big.as_bytes()));
        // SAFETY: `ptrs` has one entry per parameter, each pointing into the scratch.
        let (q1, q2) = unsafe { (*ptrs.add(1), *ptrs.add(2)) };
        // SAFETY: the scratch copy holds parameter 1 (8 bytes) and parameter 2 (100 bytes).
        let (v1, v2) = unsafe {
            (
                std::slice::from_raw_parts(q1.cast::<u8>(), 8),
                std::slice::from_raw_parts(q2.cast::<u8>(), 100),
            )
        };
        assert_eq!(v1, &7u64.to_ne_bytes());
        assert!(v2.iter().all(|&b| b == 5));
        assert!(
            p.param_bytes(2).iter().all(|&b| b == 3),
            "the node is unchanged"
        );
    }
}
