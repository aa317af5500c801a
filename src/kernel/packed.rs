//! Kernel arguments as graph nodes keep them: [`PackedArgs`] (the values at the kernel's
//! parameter offsets, with the pointer array CUDA reads) and [`ArgScratch`] (room to stage an
//! update).

use std::ffi::c_void;
use std::sync::Arc;

use super::args::KernelArg;
use super::launch::{Kernel, KernelInner};
use crate::memory::Allocation;

/// Kernel arguments packed at the kernel's parameter offsets, with the pointer array CUDA
/// reads (`kernelParams`). Updating an argument rewrites bytes in place: the pointers do not
/// change and nothing is allocated.
pub(crate) struct PackedArgs {
    /// One allocation: the `kernelParams` array (one pointer per parameter), then the
    /// argument values (8-byte words) those pointers point into.
    cells: Box<[Cell]>,
    layout: Arc<KernelInner>,
    /// The buffers the arguments refer to, one slot per parameter.
    pub(crate) buffers: Box<[Option<Arc<Allocation>>]>,
}

/// A word of [`PackedArgs::cells`]: a pointer of the `kernelParams` array, or 8 bytes of
/// argument values. `repr(C)`, pointer-sized (on the 64-bit targets CUDA supports): the first
/// cells are the `kernelParams` array CUDA reads. Copying a cell copies its bytes, pointers
/// included.
#[derive(Clone, Copy)]
#[repr(C)]
union Cell {
    word: u64,
    ptr: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<Cell>() == std::mem::size_of::<*mut c_void>());

// SAFETY: the raw pointers point into `cells`, owned by the same value.
unsafe impl Send for PackedArgs {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for PackedArgs {}

impl PackedArgs {
    /// Packs `args`, which must already match `kernel`'s layout.
    pub(crate) fn new(kernel: &Kernel, args: &[KernelArg]) -> Self {
        let params = &kernel.inner.params;
        let total = params.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
        let cells = vec![Cell { word: 0 }; params.len() + total.div_ceil(8).max(1)];
        let mut packed = PackedArgs {
            cells: cells.into_boxed_slice(),
            layout: kernel.inner.clone(),
            buffers: vec![None; params.len()].into_boxed_slice(),
        };
        packed.fix_ptrs();
        for (i, a) in args.iter().enumerate() {
            packed.set(i, a);
        }
        packed
    }

    /// Points the `kernelParams` cells at the values.
    fn fix_ptrs(&mut self) {
        let n = self.layout.params.len();
        let cells = self.cells.as_mut_ptr();
        // SAFETY: `cells` has `n` pointer cells and at least one value cell after them.
        let base = unsafe { cells.add(n) }.cast::<u8>();
        for (i, info) in self.layout.params.iter().enumerate() {
            // SAFETY: cell `i` is one of the first `params.len()` cells (the pointer array);
            // every offset is inside the values, which were sized for the layout.
            unsafe {
                cells.add(i).write(Cell {
                    ptr: base.add(info.offset).cast(),
                })
            };
        }
    }

    /// The first byte of the argument values (after the pointer array).
    fn storage_ptr(&mut self) -> *mut u8 {
        let n = self.layout.params.len();
        // SAFETY: `cells` has `n` pointer cells and at least one value cell after them.
        unsafe { self.cells.as_mut_ptr().add(n) }.cast()
    }

    /// The argument values, as bytes (whole words).
    fn storage_bytes(&self) -> &[u8] {
        let n = self.layout.params.len();
        let values = &self.cells[n..];
        // SAFETY: the value cells are initialised (zeroed, then written bytewise) and hold no
        // padding; `u8` has no alignment or validity requirement.
        unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), values.len() * 8) }
    }

    /// Writes argument `i` (already checked against parameter `i`). Returns the buffer it
    /// replaced, if any.
    pub(crate) fn set(&mut self, i: usize, a: &KernelArg) -> Option<Arc<Allocation>> {
        let info = self.layout.params[i];
        // The same buffer again (the common case when updating a value next to it): no
        // reference-count traffic.
        let same = match (&self.buffers[i], &a.buffer) {
            (Some(old), Some(new)) => Arc::ptr_eq(old, new),
            (None, None) => true,
            _ => false,
        };
        let bytes = a.as_bytes();
        debug_assert_eq!(bytes.len(), info.size);
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside the values.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.storage_ptr().add(info.offset),
                info.size,
            )
        };
        if same {
            return None;
        }
        std::mem::replace(&mut self.buffers[i], a.buffer.clone())
    }

    /// Overwrites parameter `i` with `bytes` (exactly its size), without touching buffers.
    pub(crate) fn set_bytes(&mut self, i: usize, bytes: &[u8]) {
        let info = self.layout.params[i];
        assert_eq!(bytes.len(), info.size, "parameter {i} size");
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside the values.
        unsafe {
            std::ptr::copy_nonoverlapping(
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
        for (i, info) in self.layout.params.iter().enumerate() {
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
        args: impl Iterator<Item = (usize, &'a KernelArg)>,
        f: impl FnOnce(*mut *mut c_void) -> R,
    ) -> R {
        /// Points the array back at the values when dropped.
        struct Restore<'p>(&'p mut PackedArgs);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                self.0.fix_ptrs();
            }
        }
        let g = Restore(self);
        for (i, a) in args {
            assert!(a.is_inline(), "parameter {i}: not an inline value");
            assert_eq!(a.size(), g.0.layout.params[i].size, "parameter {i} size");
            // Cell `i` is the array's pointer for parameter `i` (`i < len()`, as the layout
            // lookup above checked).
            g.0.cells[i] = Cell { ptr: a.as_ptr() };
        }
        f(g.0.kernel_params())
    }

    /// The `kernelParams` array.
    pub(crate) fn kernel_params(&self) -> *mut *mut c_void {
        // `Cell` is `repr(C)` and pointer-sized: the first cells are an array of pointers.
        self.cells.as_ptr() as *mut *mut c_void
    }

    /// Bytes of parameter `i`.
    pub(crate) fn param_bytes(&self, i: usize) -> &[u8] {
        let info = self.layout.params[i];
        &self.storage_bytes()[info.offset..info.offset + info.size]
    }

    pub(crate) fn len(&self) -> usize {
        self.layout.params.len()
    }
}

impl Clone for PackedArgs {
    fn clone(&self) -> Self {
        let mut c = PackedArgs {
            cells: self.cells.clone(),
            layout: self.layout.clone(),
            buffers: self.buffers.clone(),
        };
        c.fix_ptrs();
        c
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
mod tests {
    use super::*;
    use crate::kernel::ParamInfo;

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
