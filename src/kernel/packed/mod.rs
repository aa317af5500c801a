//! Kernel arguments as graph nodes keep them: [`PackedArgs`] (the values at the kernel's
//! parameter offsets, with the pointer array CUDA reads) and [`ArgScratch`] (room to stage an
//! update).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use super::arena::{Arena, Chunk};
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
    _chunk: Chunk<Cell>,
}

/// Where a DAG's kernel nodes keep their arguments: an [`Arena`] of cells (see
/// `kernel/arena.rs`), from which each node's block is carved.
pub(crate) type ArgArena = Arena<Cell>;

/// A word of [`PackedArgs::cells`]: a pointer of the `kernelParams` array, a buffer slot or 8
/// bytes of argument values. `repr(C)` and pointer-sized (on the 64-bit targets CUDA
/// supports), every member at offset 0: the first cells are the `kernelParams` array CUDA
/// reads, the next ones an array of `Option<Arc<Allocation>>`.
#[repr(C)]
pub(crate) union Cell {
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
        PackedArgs::pack(None, kernel, args)
    }

    /// [`PackedArgs::new`], the block carved from `arena`.
    pub(crate) fn new_in(arena: &mut ArgArena, kernel: &Kernel, args: &[KernelArg]) -> Self {
        PackedArgs::pack(Some(arena), kernel, args)
    }

    /// [`PackedArgs::new`] with the block carved from `arena`, or on its own.
    fn pack(arena: Option<&mut ArgArena>, kernel: &Kernel, args: &[KernelArg]) -> Self {
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
    /// then the value words), carved from `arena` (with none, from a chunk of its own), owned
    /// by the result. The callers hold it in a `ManuallyDrop` until they have written every
    /// cell.
    fn alloc(arena: Option<&mut ArgArena>, kernel: Kernel) -> Self {
        // At least one value cell, so the values' start is inside the block.
        assert!(kernel.inner.value_words >= 1, "at least one value cell");
        let len = block_len(&kernel);
        let (cells, chunk) = arena.map_or_else(|| ArgArena::alone(len), |a| a.take(len));
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
        let c = ManuallyDrop::new(PackedArgs::alloc(None, self.kernel.clone()));
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
mod tests;

#[cfg(test)]
impl PackedArgs {
    /// The chunk the block was carved from.
    fn chunk(&self) -> &Chunk<Cell> {
        &self._chunk
    }
}
