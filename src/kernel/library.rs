//! The loaded library (`cudaLibrary_t`) a [`Module`](super::Module) and every kernel taken from
//! it share: unloaded when the last of them is dropped, after the stream launches of its
//! kernels. It sits below `module.rs` (which loads it and takes kernels from it) and
//! `launch.rs` (whose kernels keep it loaded), so those two files do not import each other.

use std::collections::HashMap;

use crate::device::Device;
use crate::result::runtime as rt;
use crate::stream::track::GpuUses;
use crate::sys;

/// A loaded library.
pub(super) struct ModuleInner {
    pub(super) raw: sys::cudaLibrary_t,
    pub(super) device: Device,
    pub(super) lowered_names: HashMap<String, String>,
    /// Stream launches of its kernels that may still run.
    pub(super) uses: GpuUses,
    /// Code loaded by another library (a cudarc `CudaFunction`, which holds its module):
    /// `raw` is then null, and the owner is dropped, rather than a library unloaded, after the
    /// stream launches of its kernels.
    pub(crate) foreign: Option<Box<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: library handles may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if let Err(e) = self.uses.wait() {
            self.device
                .defer("a module (waiting for launches of its kernels; leaked)", e);
            // Its kernels may still run: the code must never be unloaded, by its foreign
            // owner or here.
            if let Some(owner) = self.foreign.take() {
                std::mem::forget(owner);
            }
            return;
        }
        if self.foreign.take().is_some() {
            // Dropped here: its owner unloads it.
            return;
        }
        // SAFETY: last reference: every kernel and graph node of this module holds one, and
        // the stream launches of its kernels have completed (waited for above).
        if let Err(e) = unsafe { rt::library_unload(self.raw) } {
            self.device.defer("a module", e);
        }
    }
}
