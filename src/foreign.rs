//! Memory and streams another library owns, shared with the crate without moving them in:
//! the hooks language bindings need (the Python package's `__cuda_array_interface__` arrays and
//! `__cuda_stream__` streams), where the owner is an opaque object the crate only holds.
//!
//! - [`DeviceBuffer::from_foreign`]: device memory at an address, kept alive by `owner`. The
//!   buffer's allocation holds `owner` (as the cudarc interop's moved-in slices are held) and
//!   drops it only after the queued GPU work that uses the memory has completed, so a DAG or
//!   `Exec` that refers to the buffer keeps the memory from being freed under its launches.
//!   Unlike `DeviceBuffer::from_cudarc`, the memory is *shared*: the other library may still
//!   queue work on it, ordered with the crate's work only by the streams the user picks.
//! - [`Stream::from_foreign`]: a stream another library owns, kept alive by `owner`, never
//!   destroyed by the crate.
//! - [`RecordingBackend::foreign_device_buffer`]: a recording backend's placeholder holding
//!   an owner, so bindings can test what keeps foreign objects alive without a GPU.

use std::any::Any;
use std::ffi::c_void;
use std::sync::Arc;

use crate::dag::RecordingBackend;
use crate::device::{Device, Owner};
use crate::error::{Error, Result};
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, MemorySpace};
use crate::stream::queue::StreamQueue;
use crate::stream::track::GpuUses;
use crate::stream::Stream;
use crate::sys;

/// An object another library owns, held by the crate until nothing may use it.
pub type ForeignOwner = Box<dyn Any + Send + Sync>;

/// The stream names that are not one stream: `cudaStreamLegacy` (1) and
/// `cudaStreamPerThread` (2). A per-thread name is another stream on every thread, so the
/// crate's record of what was queued last on "the" stream would be wrong.
pub(crate) fn check_stream_name(raw: usize, what: &'static str) -> Result<()> {
    let name = match raw {
        1 => "cudaStreamLegacy",
        2 => "cudaStreamPerThread",
        _ => return Ok(()),
    };
    Err(Error::BadOptions {
        what,
        problem: format!(
            "the stream handle is {name}, a name rather than one stream; pass a stream object \
             (or 0, the legacy default stream itself)"
        ),
    })
}

/// An error unless `ptr` is device memory of `device` or managed memory.
fn check_device_memory(device: &Device, ptr: u64) -> Result<()> {
    device.bind()?;
    // SAFETY: CUDA only looks the address up.
    let attrs = unsafe { crate::result::runtime::pointer_attributes(ptr as *const c_void)? };
    use sys::cudaMemoryType as M;
    let problem = match attrs.type_ {
        M::cudaMemoryTypeDevice if attrs.device as usize == device.ordinal() => return Ok(()),
        M::cudaMemoryTypeManaged => return Ok(()),
        M::cudaMemoryTypeDevice => format!(
            "the memory at {ptr:#x} is on device {}, not device {}",
            attrs.device,
            device.ordinal()
        ),
        M::cudaMemoryTypeHost => {
            format!("the memory at {ptr:#x} is pinned host memory, not device memory")
        }
        M::cudaMemoryTypeUnregistered => format!(
            "the memory at {ptr:#x} is not device memory (host memory, or no allocation CUDA \
             knows)"
        ),
    };
    Err(Error::WrongDevice {
        node: None,
        problem,
    })
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// A buffer over `len` elements of device memory at `ptr` that another library owns
    /// (`owner` keeps it allocated): usable wherever a [`DeviceBuffer`] is, and kept alive by
    /// the DAGs and `Exec`s that refer to it. `owner` is dropped once the last buffer, region,
    /// DAG and `Exec` referring to the memory are gone and the crate's GPU work using it has
    /// completed; the crate never frees the memory itself.
    ///
    /// The memory stays shared with its owner: work the other library queues on it is ordered
    /// with graph launches only by the streams used (launch on the other library's stream, see
    /// [`Stream::from_foreign`], to order them), as it would be between two of that library's
    /// own streams. The synchronous helpers (`to_vec`, `copy_from_slice`, …) wait for the
    /// crate's work only.
    ///
    /// Refused, after asking CUDA what `ptr` is (`cudaPointerGetAttributes`): memory of another
    /// device, and host memory (pinned or not: copy nodes treat the buffer as device memory)
    /// ([`Error::WrongDevice`]); a byte size that overflows `usize` ([`Error::OutOfBounds`]).
    /// Device memory of `device` and managed memory are taken.
    ///
    /// # Safety
    /// `ptr` is the address of at least `len * size_of::<T>()` bytes of one allocation of
    /// device or managed memory (the kind and device are checked here, the size and lifetime
    /// cannot be), and stays allocated (neither freed nor reused) while `owner` lives.
    pub unsafe fn from_foreign(
        device: &Device,
        ptr: u64,
        len: usize,
        owner: ForeignOwner,
    ) -> Result<Self> {
        let bytes =
            len.checked_mul(std::mem::size_of::<T>())
                .ok_or_else(|| Error::OutOfBounds {
                    node: None,
                    problem: format!("{len} elements overflow usize"),
                })?;
        if bytes > 0 {
            check_device_memory(device, ptr)?;
        }
        let alloc = Allocation {
            ptr,
            bytes,
            space: MemorySpace::Device,
            owner: Owner::Cuda(device.clone()),
            uses: GpuUses::default(),
            foreign: Some(owner),
        };
        Ok(DeviceBuffer::from_alloc(Arc::new(alloc), len))
    }
}

impl Stream {
    /// A cudagraph stream on a stream another library owns (`owner` keeps it alive; the crate
    /// never destroys it): launch an [`Exec`](crate::Exec) on it in order with that library's
    /// work. Wrap a stream once and keep the result (see `Stream::raw`: work queued on the same
    /// CUDA stream through another wrapper is unseen, so a wait for a launch may include it —
    /// longer, never shorter).
    ///
    /// Refused ([`Error::BadOptions`]): the per-thread and legacy stream names (1 and 2), which
    /// are not one stream. The null handle (0) is the legacy default stream of the device.
    ///
    /// # Safety
    /// `raw` is a stream of `device`'s primary context (or 0), valid while `owner` lives.
    pub unsafe fn from_foreign(
        device: &Device,
        raw: sys::cudaStream_t,
        owner: ForeignOwner,
    ) -> Result<Stream> {
        check_stream_name(raw as usize, "Stream::from_foreign")?;
        // SAFETY: the caller's contract; `raw` is one stream (checked above).
        let inner = unsafe { StreamQueue::borrowed(device, raw, owner) };
        Ok(Stream { inner })
    }
}

impl RecordingBackend {
    /// A placeholder device buffer of `len` elements on the home device that holds `owner`
    /// the way [`DeviceBuffer::from_foreign`] does (no memory behind it): `owner` is dropped
    /// with the last buffer, region, DAG or node referring to the placeholder. For testing
    /// what keeps foreign objects alive without a GPU.
    pub fn foreign_device_buffer<T: DeviceRepr>(
        &mut self,
        len: usize,
        owner: ForeignOwner,
    ) -> DeviceBuffer<T> {
        let mut b = self.device_buffer::<T>(len);
        let alloc = Arc::get_mut(&mut b.alloc).expect("a new placeholder has one owner");
        alloc.foreign = Some(owner);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{args, Dag, DeviceLimits, LaunchConfig};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops.
    struct Owned(Arc<AtomicUsize>);
    impl Drop for Owned {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_foreign_owner_lives_as_long_as_the_last_dag_using_its_memory() {
        let mut rec = RecordingBackend::new(DeviceLimits::hopper());
        let drops = Arc::new(AtomicUsize::new(0));
        let x = rec.foreign_device_buffer::<f32>(16, Box::new(Owned(drops.clone())));
        let k = rec.kernel("k", &[8]);
        let mut dag = Dag::new();
        dag.add_kernel(&k, LaunchConfig::new(1, 16), &args![&x])
            .unwrap();
        let mut child = Dag::new();
        child.add_memset(&x, 0u32).unwrap();
        dag.add_child(&child);
        drop(child);
        drop(x);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the DAG still refers to it"
        );
        dag.lower(&mut rec).unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(dag);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "dropped once, with the DAG"
        );
    }

    #[test]
    fn a_placeholder_has_no_gpu_work_to_wait_for() {
        let mut rec = RecordingBackend::new(DeviceLimits::hopper());
        let x = rec.device_buffer::<f32>(4);
        let mut dag = Dag::new();
        dag.add_memset(&x, 0u32).unwrap();
        dag.lower(&mut rec).unwrap();
        x.synchronize().unwrap();
    }

    #[test]
    fn stream_names_that_are_not_one_stream_are_refused() {
        for raw in [1usize, 2] {
            let e = check_stream_name(raw, "Stream::from_foreign").unwrap_err();
            assert!(e.to_string().contains("rather than one stream"), "{e}");
        }
        check_stream_name(0, "Stream::from_foreign").unwrap();
        check_stream_name(0x5555_0000, "Stream::from_foreign").unwrap();
    }
}
