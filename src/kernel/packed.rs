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
    storage: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
    layout: Arc<KernelInner>,
    /// The buffers the arguments refer to, one slot per parameter.
    pub(crate) buffers: Box<[Option<Arc<Allocation>>]>,
}

// SAFETY: the raw pointers point into `storage`, owned by the same value.
unsafe impl Send for PackedArgs {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for PackedArgs {}

impl PackedArgs {
    /// Packs `args`, which must already match `kernel`'s layout.
    pub(crate) fn new(kernel: &Kernel, args: &[KernelArg]) -> Self {
        let params = &kernel.inner.params;
        let total = params.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
        let storage = vec![0u64; total.div_ceil(8).max(1)].into_boxed_slice();
        let mut packed = PackedArgs {
            ptrs: vec![std::ptr::null_mut(); params.len()].into_boxed_slice(),
            storage,
            layout: kernel.inner.clone(),
            buffers: vec![None; params.len()].into_boxed_slice(),
        };
        packed.fix_ptrs();
        for (i, a) in args.iter().enumerate() {
            packed.set(i, a);
        }
        packed
    }

    fn fix_ptrs(&mut self) {
        let base = self.storage.as_mut_ptr().cast::<u8>();
        for (p, info) in self.ptrs.iter_mut().zip(&self.layout.params) {
            // SAFETY: every offset is inside `storage`, which was sized for the layout.
            *p = unsafe { base.add(info.offset) }.cast();
        }
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
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside `storage`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.storage.as_mut_ptr().cast::<u8>().add(info.offset),
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
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside `storage`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.storage.as_mut_ptr().cast::<u8>().add(info.offset),
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
        scratch.storage.clear();
        scratch.storage.extend_from_slice(&self.storage);
        let base = scratch.storage.as_mut_ptr().cast::<u8>();
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

    /// The `kernelParams` array.
    pub(crate) fn kernel_params(&self) -> *mut *mut c_void {
        self.ptrs.as_ptr() as *mut *mut c_void
    }

    /// Bytes of parameter `i`.
    pub(crate) fn param_bytes(&self, i: usize) -> &[u8] {
        let info = self.layout.params[i];
        // SAFETY: in bounds as in `set`.
        unsafe {
            std::slice::from_raw_parts(
                self.storage.as_ptr().cast::<u8>().add(info.offset),
                info.size,
            )
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ptrs.len()
    }
}

impl Clone for PackedArgs {
    fn clone(&self) -> Self {
        let mut c = PackedArgs {
            storage: self.storage.clone(),
            ptrs: self.ptrs.clone(),
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

// SAFETY: the pointers point into `storage`, owned by the same value, and are only written and
// read through `&mut self`.
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
}
