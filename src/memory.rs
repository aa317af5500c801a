//! Device memory ([`DeviceBuffer`]), page-locked host memory ([`HostBuffer`]) and regions of
//! them ([`Region`]) that graph nodes refer to.
//!
//! A buffer's allocation is reference-counted: a graph node, or an executable graph, that
//! refers to a buffer holds a count on it, so memory is freed only when the user's buffer *and*
//! every graph using it are gone.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::ops::RangeBounds;
use std::sync::Arc;

use crate::device::{Device, Owner};

mod region;
use crate::error::{Error, Result};
use crate::result::runtime as rt;
use crate::stream::queue::Queued;
use crate::stream::track::{self, GpuUses};
use crate::stream::Stream;
use crate::sys;
use region::element_range;
pub use region::Region;

/// Plain data that may be copied to and from the GPU byte for byte, and passed to kernels.
///
/// It is [`bytemuck::Pod`]: no padding (its bytes may be read as plain data, e.g. packed as a
/// kernel argument) and every bit pattern valid (the GPU may write anything into it). Integers,
/// floats, [`num_complex::Complex`] of those and arrays of such types qualify; `bool`, `char`,
/// references and structs with padding do not. For your own `#[repr(C)]` structs, derive
/// `bytemuck::Pod` and `bytemuck::Zeroable` (the derive rejects a struct with padding):
///
/// ```
/// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
/// #[repr(C)]
/// struct Params { scale: f32, count: u32, offset: u64 }
/// let arg = cudagraph::KernelArg::from(Params { scale: 1.0, count: 3, offset: 0 });
/// assert_eq!(arg.size(), 16);
/// ```
pub trait DeviceRepr: bytemuck::Pod + Send + Sync + 'static {}

impl<T: bytemuck::Pod + Send + Sync + 'static> DeviceRepr for T {}

/// Where an allocation lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemorySpace {
    /// Device memory (`cudaMalloc`).
    Device,
    /// Page-locked host memory (`cudaHostAlloc`), which the GPU can copy from asynchronously.
    PinnedHost,
}

/// One allocation; freed when the last reference goes, after the GPU work that uses it.
pub(crate) struct Allocation {
    pub(crate) ptr: u64,
    pub(crate) bytes: usize,
    pub(crate) space: MemorySpace,
    pub(crate) owner: Owner,
    /// The queued GPU work that may use the memory (see `track`).
    pub(crate) uses: GpuUses,
    /// Memory another library allocated (a cudarc `CudaSlice`, moved in by
    /// `DeviceBuffer::from_cudarc`): its owner, dropped (it frees the memory its own way) once
    /// the GPU work using the memory has completed, instead of `cudaFree`. `None` for the
    /// crate's own allocations.
    pub(crate) foreign: Option<Box<dyn std::any::Any + Send + Sync>>,
}

/// Waits for the legacy default stream, on which the synchronous helpers run: they return
/// only after their work has completed on the device, so later work on any stream sees it.
fn finish_sync_helper() -> Result<()> {
    // SAFETY: the null stream is the legacy default stream, always valid.
    unsafe { rt::stream_synchronize(std::ptr::null_mut()) }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} {:#x}+{}", self.space, self.ptr, self.bytes)
    }
}

impl Allocation {
    pub(crate) fn new(device: &Device, bytes: usize, space: MemorySpace) -> Result<Arc<Self>> {
        device.bind()?;
        let ptr = if bytes == 0 {
            std::ptr::null_mut()
        } else {
            match space {
                // SAFETY: the allocation is owned by the returned value and freed in Drop.
                MemorySpace::Device => unsafe { rt::malloc(bytes)? },
                // SAFETY: as above; portable so any device may copy from it.
                MemorySpace::PinnedHost => unsafe {
                    rt::host_alloc(bytes, sys::cudaHostAllocPortable)?
                },
            }
        };
        Ok(Arc::new(Allocation {
            ptr: ptr as u64,
            bytes,
            space,
            owner: Owner::Cuda(device.clone()),
            uses: GpuUses::default(),
            foreign: None,
        }))
    }

    /// A placeholder of a recording backend.
    pub(crate) fn placeholder(ptr: u64, bytes: usize, space: MemorySpace, backend: u64) -> Self {
        Allocation {
            ptr,
            bytes,
            space,
            owner: Owner::Recording(backend),
            uses: GpuUses::default(),
            foreign: None,
        }
    }

    pub(crate) fn device(&self) -> Option<&Device> {
        match &self.owner {
            Owner::Cuda(d) => Some(d),
            Owner::Recording(_) => None,
        }
    }

    /// The device, or an error for recording-backend placeholders.
    pub(crate) fn real_device(&self) -> Result<&Device> {
        self.device().ok_or_else(|| Error::WrongDevice {
            node: None,
            problem: "this buffer was made by a RecordingBackend and has no memory behind it"
                .into(),
        })
    }
}

/// What an allocation of memory cudarc lent (`Lent`, feature `cudarc`) holds in place of an
/// owner: nothing to free (cudarc's slice owns the memory), and the mark that it is lent.
#[cfg(feature = "cudarc")]
pub(crate) struct LentMemory;

impl Allocation {
    /// Whether this is memory cudarc lent (`Lent`, feature `cudarc`): its owner is cudarc's
    /// slice, which the crate does not hold, so only graph launches that bind the slice
    /// (`Exec::launch_lent`) may use it.
    pub(crate) fn is_lent(&self) -> bool {
        #[cfg(feature = "cudarc")]
        {
            self.foreign
                .as_ref()
                .is_some_and(|f| (**f).is::<LentMemory>())
        }
        #[cfg(not(feature = "cudarc"))]
        false
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        let Owner::Cuda(device) = &self.owner else {
            return;
        };
        // Queued GPU work may still use the memory: wait for it before freeing.
        let waited = self.uses.wait();
        if let Some(owner) = self.foreign.take() {
            match waited {
                // Its owner frees the memory (after its own library's pending work).
                Ok(()) => drop(owner),
                Err(e) => {
                    // The work using it may still run: the memory must never be freed.
                    std::mem::forget(owner);
                    device.defer("a buffer (waiting for the GPU work using it)", e);
                }
            }
            return;
        }
        if let Err(e) = waited {
            // The work using it may still run (pinned memory may still be written by a copy):
            // the memory is leaked rather than freed under it.
            device.defer("a buffer (waiting for the GPU work using it; leaked)", e);
            return;
        }
        if self.ptr == 0 {
            return;
        }
        let p = self.ptr as *mut c_void;
        // SAFETY: the pointer came from the matching allocator and this is its last reference;
        // every executable graph that refers to it holds a reference, and the stream
        // operations and past launches that used it have completed (waited for above).
        let r = unsafe {
            match self.space {
                MemorySpace::Device => rt::free(p),
                MemorySpace::PinnedHost => rt::free_host(p),
            }
        };
        if let Err(e) = r {
            device.defer("a buffer", e);
        }
    }
}

macro_rules! buffer_common {
    ($name:ident) => {
        impl<T: DeviceRepr> $name<T> {
            /// Number of elements.
            pub fn len(&self) -> usize {
                self.len
            }
            /// Whether the buffer has no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }
            /// Size in bytes.
            pub fn size_bytes(&self) -> usize {
                self.len * std::mem::size_of::<T>()
            }
            /// The elements `range` (in elements) as a region for graph nodes. The range is
            /// not checked here; nodes using it are.
            pub fn region(&self, range: impl RangeBounds<usize>) -> Region {
                let (start, n) = element_range(range, self.len);
                let sz = std::mem::size_of::<T>();
                Region {
                    alloc: self.alloc.clone(),
                    offset: start.saturating_mul(sz),
                    len: n.saturating_mul(sz),
                    elem: sz,
                }
            }
            /// The address of the first element (a device address for device buffers, a host
            /// address for pinned host buffers).
            ///
            /// # Safety
            /// As for [`Region::addr`]: the address keeps nothing alive, so GPU work given it
            /// must complete before `self` is dropped, and must not race host access.
            pub unsafe fn as_raw_ptr(&self) -> u64 {
                self.alloc.ptr
            }
            fn check_len(&self, n: usize, what: &str) -> Result<()> {
                if n != self.len {
                    return Err(Error::OutOfBounds {
                        node: None,
                        problem: format!(
                            "{what}: the buffer has {} elements but the slice has {n}",
                            self.len
                        ),
                    });
                }
                Ok(())
            }
        }

        impl<T: DeviceRepr> From<&$name<T>> for Region {
            fn from(b: &$name<T>) -> Region {
                b.region(..)
            }
        }

        impl<T> std::fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("len", &self.len)
                    .field("alloc", &self.alloc)
                    .finish()
            }
        }
    };
}

/// A typed array in device memory.
///
/// The synchronous helpers (`zeros`, `from_slice`, `copy_from_slice`, `copy_to_slice`,
/// `to_vec`, `copy_from_device`, `memset_bytes`) first wait for the queued GPU work that uses
/// the buffer (stream operations and launches of executable graphs that refer to it), then run
/// and return only when their work has completed on the device: they are ordered with all the
/// crate's streams. Work that uses the buffer, queued from another thread while a helper runs
/// (a stream operation, or a launch of a graph that refers to the buffer), waits until the
/// helper has returned, so it never overlaps the helper's copy. `copy_from_host_async` is stream-ordered instead. Dropping a buffer waits
/// for the queued work that uses it before freeing the memory.
pub struct DeviceBuffer<T> {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

buffer_common!(DeviceBuffer);

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Allocates `len` elements and zeroes them (completed on return).
    pub fn zeros(device: &Device, len: usize) -> Result<Self> {
        let b = Self::alloc_uninit(device, len)?;
        b.memset_bytes(0)?;
        Ok(b)
    }

    /// Allocates without initialising; every constructor writes the memory before returning.
    fn alloc_uninit(device: &Device, len: usize) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        Ok(DeviceBuffer {
            alloc: Allocation::new(device, bytes, MemorySpace::Device)?,
            len,
            _t: PhantomData,
        })
    }

    /// Allocates a buffer holding a copy of `data`.
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let b = Self::alloc_uninit(device, data.len())?;
        b.copy_from_slice(data)?;
        Ok(b)
    }

    /// The same memory as elements of `U`, a type of the same size and no stricter alignment
    /// (`f32` for `u32`, `Complex32` for `u64`, `Complex64` for `[u64; 2]`): another handle to
    /// the one allocation, which its GPU work, its users and its lifetime are counted on, as
    /// for a clone. Both types are plain data ([`DeviceRepr`]), so any bytes one writes are a
    /// valid value of the other. Types of another size or a stricter alignment do not compile.
    ///
    /// ```
    /// use cudagraph::{DeviceLimits, RecordingBackend};
    /// let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    /// let words = rec.device_buffer::<u32>(16);
    /// let floats = words.view_as::<f32>();
    /// assert_eq!((floats.len(), floats.size_bytes()), (16, 64));
    /// ```
    ///
    /// ```compile_fail
    /// # use cudagraph::{DeviceLimits, RecordingBackend};
    /// # let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    /// let bytes = rec.device_buffer::<u8>(16);
    /// let _ = bytes.view_as::<f32>(); // 1-byte elements as 4-byte ones
    /// ```
    pub fn view_as<U: DeviceRepr>(&self) -> DeviceBuffer<U> {
        const {
            assert!(
                std::mem::size_of::<U>() == std::mem::size_of::<T>()
                    && std::mem::align_of::<U>() <= std::mem::align_of::<T>(),
                "view_as: U must have T's size and no stricter alignment"
            )
        };
        DeviceBuffer::from_alloc(self.alloc.clone(), self.len)
    }

    pub(crate) fn from_alloc(alloc: Arc<Allocation>, len: usize) -> Self {
        DeviceBuffer {
            alloc,
            len,
            _t: PhantomData,
        }
    }

    /// The device the buffer lives on (`None` for a recording backend's placeholder).
    pub fn device(&self) -> Option<&Device> {
        self.alloc.device()
    }

    /// Waits for the queued GPU work that uses the buffer (stream operations and launches of
    /// executable graphs that refer to it): afterwards, until more is queued, no work of the
    /// crate uses the memory, e.g. before handing the address to another library. Not from a
    /// host node ([`Error::InHostNode`]). Nothing to wait for on a recording backend's
    /// placeholder.
    pub fn synchronize(&self) -> Result<()> {
        track::with_gpu_idle("DeviceBuffer::synchronize", [&self.alloc.uses], || ())
    }

    /// Runs the synchronous copy or memset `f` (on the legacy default stream) once the queued
    /// GPU work that uses `allocs` has completed, and waits for it, with no GPU work that uses
    /// them able to start meanwhile, from any thread ([`track::with_gpu_idle`]).
    fn sync_helper(
        what: &str,
        allocs: &[&Allocation],
        f: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        track::with_gpu_idle(what, allocs.iter().map(|a| &a.uses), || {
            f()?;
            finish_sync_helper()
        })?
    }

    /// Overwrites the buffer with `data` (same length), after the queued GPU work that uses
    /// the buffer; complete on return.
    pub fn copy_from_slice(&self, data: &[T]) -> Result<()> {
        self.check_len(data.len(), "copy_from_slice")?;
        self.alloc.real_device()?.bind()?;
        let bytes = self.size_bytes();
        Self::sync_helper("DeviceBuffer::copy_from_slice", &[&self.alloc], || {
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: both ranges are `bytes` long; the device range is owned by `self`, and
            // no GPU work uses it now (`sync_helper`).
            unsafe {
                rt::memcpy(
                    self.alloc.ptr as *mut c_void,
                    data.as_ptr().cast(),
                    bytes,
                    sys::cudaMemcpyKind::cudaMemcpyHostToDevice,
                )
            }
        })
    }

    /// Copies the buffer into `out` (same length), after the queued GPU work that uses it.
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        self.check_len(out.len(), "copy_to_slice")?;
        self.alloc.real_device()?.bind()?;
        let bytes = self.size_bytes();
        Self::sync_helper("DeviceBuffer::copy_to_slice", &[&self.alloc], || {
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: both ranges are `bytes` long; any bit pattern is a valid `T`; no GPU
            // work writes the buffer now (`sync_helper`).
            unsafe {
                rt::memcpy(
                    out.as_mut_ptr().cast(),
                    self.alloc.ptr as *const c_void,
                    bytes,
                    sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                )
            }
        })
    }

    /// Copies the buffer into a new `Vec`.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_slice(&mut v)?;
        Ok(v)
    }

    /// Copies all of `src` (same length) into this buffer, device to device, after the queued
    /// GPU work that uses either; complete on return.
    pub fn copy_from_device(&self, src: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(src.len, "copy_from_device")?;
        self.alloc.real_device()?.bind()?;
        src.alloc.real_device()?;
        // By address, not allocation: one memory wrapped twice (`from_foreign` of one array)
        // is two allocations. The same memory is a copy onto itself; any other overlap is
        // refused (CUDA copies need distinct memory).
        let (d, s) = (self.region(..), src.region(..));
        if d.same_memory(&s) {
            return Ok(());
        }
        if d.overlaps(&s) {
            return Err(Error::OutOfBounds {
                node: None,
                problem: format!(
                    "copy_from_device: the source ({:#x}, {} bytes) and the destination ({:#x}) \
                     overlap; CUDA copies need distinct memory",
                    s.raw_addr(),
                    s.len,
                    d.raw_addr()
                ),
            });
        }
        let bytes = self.size_bytes();
        let allocs = [&*self.alloc, &*src.alloc];
        Self::sync_helper("DeviceBuffer::copy_from_device", &allocs, || {
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: both device ranges are `bytes` long, live and disjoint (checked by
            // address above); no GPU work uses either now (`sync_helper`).
            unsafe {
                rt::memcpy(
                    self.alloc.ptr as *mut c_void,
                    src.alloc.ptr as *const c_void,
                    bytes,
                    sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                )
            }
        })
    }

    /// Sets every byte of the buffer to `value`, after the queued GPU work that uses the
    /// buffer; complete on return.
    pub fn memset_bytes(&self, value: u8) -> Result<()> {
        self.alloc.real_device()?.bind()?;
        let bytes = self.size_bytes();
        Self::sync_helper("DeviceBuffer::memset_bytes", &[&self.alloc], || {
            if bytes == 0 {
                return Ok(());
            }
            // SAFETY: the range is owned by `self`; no GPU work uses it now (`sync_helper`).
            unsafe { rt::memset(self.alloc.ptr as *mut c_void, value as i32, bytes) }
        })
    }

    /// Queues a device-to-device copy of all of `src` (same length, another buffer) into this
    /// buffer on `stream`. Either buffer may be dropped at once (freed after the copy ran). The
    /// copy is ordered with the work on `stream` only.
    pub fn copy_from_device_async(&self, src: &DeviceBuffer<T>, stream: &Stream) -> Result<()> {
        self.check_len(src.len, "copy_from_device_async")?;
        stream.check_device(self.alloc.real_device()?, "the destination buffer")?;
        stream.check_device(src.alloc.real_device()?, "the source buffer")?;
        if Arc::ptr_eq(&self.alloc, &src.alloc) {
            return Err(Error::OutOfBounds {
                node: None,
                problem: "copy_from_device_async: source and destination are the same buffer"
                    .into(),
            });
        }
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are `size_bytes` long, live and distinct allocations.
        unsafe {
            queue_copy(
                &self.alloc,
                &src.alloc,
                0,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyDeviceToDevice,
                stream,
            )
        }
    }

    /// Queues a copy from the pinned `src` (same length) on `stream`. Both buffers may be
    /// dropped at once: their memory is freed only after the copy has run, and a host write to
    /// `src` waits for it. The copy is ordered with the work on `stream` only.
    pub fn copy_from_host_async(&self, src: &HostBuffer<T>, stream: &Stream) -> Result<()> {
        self.check_len(src.len, "copy_from_host_async")?;
        stream.check_device(self.alloc.real_device()?, "the destination buffer")?;
        src.alloc.real_device()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are `size_bytes` long and live, one device and one pinned
        // allocation; host writes to `src` wait for the marker `queue_copy` notes.
        unsafe {
            queue_copy(
                &self.alloc,
                &src.alloc,
                0,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyHostToDevice,
                stream,
            )
        }
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Queues a copy of this buffer into the pinned `dst` (same length) on `stream`. Host
    /// access to `dst` (which needs it not borrowed) waits for the copy; either buffer may be
    /// dropped at once. The copy is ordered with the work on `stream` only.
    pub fn copy_to_host_async(&self, dst: &mut HostBuffer<T>, stream: &Stream) -> Result<()> {
        self.check_len(dst.len, "copy_to_host_async")?;
        stream.check_device(self.alloc.real_device()?, "the source buffer")?;
        dst.alloc.real_device()?;
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are `size_bytes` long and live, one device and one pinned
        // allocation; host access to `dst` is excluded while the copy is issued (`&mut`) and
        // waits for the marker `queue_copy` notes afterwards.
        unsafe {
            queue_copy(
                &dst.alloc,
                &self.alloc,
                0,
                self.size_bytes(),
                sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                stream,
            )
        }
    }

    /// Queues a copy of elements `range` of this buffer into the same elements of the pinned
    /// `dst` (same length) on `stream`, as [`copy_to_host_async`](Self::copy_to_host_async)
    /// does for the whole buffer: host access to `dst` waits for the copy, either buffer may be
    /// dropped at once, and the copy is ordered with the work on `stream` only. A range that
    /// does not lie within the buffer is refused ([`Error::OutOfBounds`]); an empty one queues
    /// nothing.
    pub fn copy_range_to_host_async(
        &self,
        range: std::ops::Range<usize>,
        dst: &mut HostBuffer<T>,
        stream: &Stream,
    ) -> Result<()> {
        self.check_len(dst.len, "copy_range_to_host_async")?;
        if range.start > range.end || range.end > self.len {
            return Err(Error::OutOfBounds {
                node: None,
                problem: format!(
                    "copy_range_to_host_async: elements {}..{} of a buffer of {}",
                    range.start, range.end, self.len
                ),
            });
        }
        stream.check_device(self.alloc.real_device()?, "the source buffer")?;
        dst.alloc.real_device()?;
        if range.is_empty() {
            return Ok(());
        }
        let sz = std::mem::size_of::<T>();
        // SAFETY: `range` lies within both buffers (same length, checked above), one device
        // and one pinned allocation, both live; host access to `dst` is excluded while the
        // copy is issued (`&mut`) and waits for the marker `queue_copy` notes afterwards.
        unsafe {
            queue_copy(
                &dst.alloc,
                &self.alloc,
                range.start * sz,
                range.len() * sz,
                sys::cudaMemcpyKind::cudaMemcpyDeviceToHost,
                stream,
            )
        }
    }
}

/// Queues a copy of `bytes` from `src` to `dst` on `stream`, both starting `offset` bytes
/// into their allocation, then notes a marker of it on both allocations, so that neither is
/// freed, and pinned memory not accessed by the host, before the copy has run.
///
/// # Safety
/// Both allocations are real memory of the stream's device (or pinned), hold at least
/// `offset + bytes` bytes, are distinct, and match `kind`.
unsafe fn queue_copy(
    dst: &Arc<Allocation>,
    src: &Arc<Allocation>,
    offset: usize,
    bytes: usize,
    kind: sys::cudaMemcpyKind,
    stream: &Stream,
) -> Result<()> {
    // Locked before queuing, marked before unlocking: ordered with the synchronous helpers.
    let mut uses = track::lock_all("an asynchronous copy", [&dst.uses, &src.uses])?;
    let tail = stream.queue()?;
    // SAFETY: the caller's contract; the markers below keep both alive until the copy ran.
    unsafe {
        rt::memcpy_async(
            (dst.ptr as usize + offset) as *mut c_void,
            (src.ptr as usize + offset) as *const c_void,
            bytes,
            kind,
            tail.raw(),
        )?
    };
    match tail.mark_queued() {
        Queued::Marked(m) => {
            uses.add_marker(&m);
            Ok(())
        }
        // The copy has run: nothing to note.
        Queued::Ran(e) => Err(e),
        Queued::Unknown(e) => {
            // The copy may still run: neither end may ever be freed, nor accessed by the host.
            uses.add_lost();
            std::mem::forget(Arc::clone(dst));
            std::mem::forget(Arc::clone(src));
            Err(e)
        }
    }
}

/// A typed array in page-locked (pinned) host memory.
///
/// Graph memcpy nodes to or from the host use these: the graph reads and writes them when it
/// runs, not when it is built, and keeps them alive. The host reads them with
/// [`copy_to_slice`](HostBuffer::copy_to_slice) / [`to_vec`](HostBuffer::to_vec) and writes
/// them with [`copy_from_slice`](HostBuffer::copy_from_slice) (which needs `&mut`): both first
/// wait for the queued GPU work that uses the buffer (copies on streams, and every launch of an
/// executable graph that refers to it), and no such graph can be launched while they run, so
/// the host never touches memory the GPU may be writing. Inside a host node, where waiting
/// would deadlock, [`as_slice`](HostBuffer::as_slice) / [`as_mut_slice`](HostBuffer::as_mut_slice)
/// give direct (unsafe) access.
///
/// Writes need `&mut`, so two threads cannot write at once:
///
/// ```compile_fail
/// # fn f(h: &cudagraph::HostBuffer<f32>) {
/// h.copy_from_slice(&[1.0]); // error: `h` is a `&` reference
/// # }
/// ```
///
/// and a raw address, which keeps nothing alive, needs `unsafe`:
///
/// ```compile_fail
/// # fn f(x: &cudagraph::DeviceBuffer<f32>) -> cudagraph::KernelArg {
/// cudagraph::KernelArg::from(x.region(..).addr()) // error: `addr` is an unsafe fn
/// # }
/// ```
pub struct HostBuffer<T> {
    pub(crate) alloc: Arc<Allocation>,
    len: usize,
    _t: PhantomData<T>,
}

buffer_common!(HostBuffer);

/// The bytes of `len` elements of `T`; an error when that overflows `usize`.
fn byte_size<T>(len: usize) -> Result<usize> {
    len.checked_mul(std::mem::size_of::<T>())
        .ok_or_else(|| Error::OutOfBounds {
            node: None,
            problem: format!("{len} elements overflow usize"),
        })
}

impl<T: DeviceRepr> HostBuffer<T> {
    /// Allocates `len` zeroed elements of pinned memory.
    pub fn zeros(device: &Device, len: usize) -> Result<Self> {
        let bytes = byte_size::<T>(len)?;
        let alloc = Allocation::new(device, bytes, MemorySpace::PinnedHost)?;
        if bytes > 0 {
            // SAFETY: the allocation is `bytes` long and not yet shared.
            unsafe { std::ptr::write_bytes(alloc.ptr as *mut u8, 0, bytes) };
        }
        Ok(HostBuffer {
            alloc,
            len,
            _t: PhantomData,
        })
    }

    /// Allocates pinned memory holding a copy of `data`.
    pub fn from_slice(device: &Device, data: &[T]) -> Result<Self> {
        let mut b = Self::zeros(device, data.len())?;
        b.copy_from_slice(data)?;
        Ok(b)
    }

    pub(crate) fn from_alloc(alloc: Arc<Allocation>, len: usize) -> Self {
        HostBuffer {
            alloc,
            len,
            _t: PhantomData,
        }
    }

    /// Runs `f` on the memory with the buffer's use list locked, after the queued GPU work
    /// that uses it has completed: no graph that refers to the buffer can be launched, and no
    /// stream operation on it noted, until `f` returns.
    fn with_gpu_idle<R>(&self, what: &str, f: impl FnOnce() -> R) -> Result<R> {
        self.alloc.real_device()?;
        track::with_gpu_idle(what, [&self.alloc.uses], f)
    }

    /// Overwrites the contents with `data` (same length), after the queued GPU work that uses
    /// the buffer.
    pub fn copy_from_slice(&mut self, data: &[T]) -> Result<()> {
        self.check_len(data.len(), "copy_from_slice")?;
        let (dst, n) = (self.alloc.ptr as *mut T, self.len);
        self.with_gpu_idle("HostBuffer::copy_from_slice", || {
            if n > 0 {
                // SAFETY: the allocation holds `n` elements; no GPU work uses it (waited for,
                // and none can start while the lock is held); `&mut self` excludes other host
                // access through this buffer; the source is a distinct slice.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, n) };
            }
        })
    }

    /// Copies the contents into `out` (same length), after the queued GPU work that uses the
    /// buffer.
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        self.check_len(out.len(), "copy_to_slice")?;
        let (src, n) = (self.alloc.ptr as *const T, self.len);
        self.with_gpu_idle("HostBuffer::copy_to_slice", || {
            if n > 0 {
                // SAFETY: as in `copy_from_slice`; host writes need `&mut self`, so none runs
                // now; any bit pattern is a valid `T`.
                unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), n) };
            }
        })
    }

    /// Copies the contents into a new `Vec`, after the queued GPU work that uses the buffer.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_slice(&mut v)?;
        Ok(v)
    }

    /// Runs `f` on the contents, after the queued GPU work that uses the buffer has completed,
    /// with the buffer's use list locked: no graph that refers to the buffer can be launched,
    /// and no stream operation on it noted, until `f` returns. For reading in place (e.g. in
    /// parallel) without a copy. Inside `f`, on this thread, the crate's synchronous helpers,
    /// stream operations and graph launches are refused ([`Error::InsideHelper`]): they could
    /// wait for this very call.
    pub fn read_with<R>(&self, f: impl FnOnce(&[T]) -> R) -> Result<R> {
        let (ptr, n) = (self.alloc.ptr as *const T, self.len);
        self.with_gpu_idle("HostBuffer::read_with", || {
            let s: &[T] = if n == 0 {
                &[]
            } else {
                // The allocation is real memory (checked by `with_gpu_idle`) holding `n`
                // initialised elements; no GPU work uses it (waited for, none can start while
                // the lock is held); host writes need `&mut self`, so none runs now.
                // SAFETY: see above; the slice does not outlive the call.
                unsafe { std::slice::from_raw_parts(ptr, n) }
            };
            f(s)
        })
    }

    /// Runs `f` on the contents, writable, after the queued GPU work that uses the buffer has
    /// completed, with the use list locked (as for [`HostBuffer::read_with`]). For filling the
    /// buffer in place (e.g. in parallel, or straight from a file) without a copy.
    pub fn write_with<R>(&mut self, f: impl FnOnce(&mut [T]) -> R) -> Result<R> {
        let (ptr, n) = (self.alloc.ptr as *mut T, self.len);
        self.with_gpu_idle("HostBuffer::write_with", || {
            let s: &mut [T] = if n == 0 {
                &mut []
            } else {
                // SAFETY: as in `read_with`; `&mut self` makes this the only host access
                // through the buffer, and every bit pattern written is a valid `T`.
                unsafe { std::slice::from_raw_parts_mut(ptr, n) }
            };
            f(s)
        })
    }

    /// The contents as a slice, without waiting for the GPU.
    ///
    /// # Safety
    /// No GPU work may write the buffer while the slice lives: e.g. inside a host node that the
    /// DAG orders after every node writing the buffer, in a graph that is not launched
    /// concurrently with itself on other streams, or after synchronising with that work.
    /// A recording backend's placeholder (no memory behind it) is an error.
    pub unsafe fn as_slice(&self) -> Result<&[T]> {
        self.alloc.real_device()?;
        if self.len == 0 {
            return Ok(&[]);
        }
        // SAFETY: the allocation is real memory holding `len` initialised elements (zeroed at
        // allocation) and lives as long as `self`; the caller rules out concurrent GPU writes.
        Ok(unsafe { std::slice::from_raw_parts(self.alloc.ptr as *const T, self.len) })
    }

    /// The contents as a mutable slice, without waiting for the GPU.
    ///
    /// # Safety
    /// No GPU work may read or write the buffer while the slice lives (as for
    /// [`HostBuffer::as_slice`], with readers too).
    /// A recording backend's placeholder is an error.
    pub unsafe fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.alloc.real_device()?;
        if self.len == 0 {
            return Ok(&mut []);
        }
        // SAFETY: as above; `&mut self` makes the slice the only host access through `self`.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr as *mut T, self.len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_is_the_same_allocation_with_the_same_length() {
        let mut rec = crate::RecordingBackend::new(crate::DeviceLimits::hopper());
        let pairs = rec.device_buffer::<[u64; 2]>(3);
        let complex = pairs.view_as::<num_complex::Complex64>();
        assert!(Arc::ptr_eq(&pairs.alloc, &complex.alloc), "one allocation");
        assert_eq!(complex.len(), 3);
        assert_eq!(complex.region(1..).raw_addr(), pairs.region(1..).raw_addr());
        assert_eq!(Arc::strong_count(&pairs.alloc), 2, "counted as a clone");
        drop(pairs);
        assert_eq!(Arc::strong_count(&complex.alloc), 1, "the view keeps it");
    }

    #[test]
    fn element_ranges() {
        assert_eq!(element_range(.., 10), (0, 10));
        assert_eq!(element_range(2..5, 10), (2, 3));
        assert_eq!(element_range(2..=5, 10), (2, 4));
        assert_eq!(element_range(8.., 10), (8, 2));
        assert_eq!(element_range(12.., 10), (12, 0));
    }
}
