//! Interoperation with [cudarc](https://docs.rs/cudarc) (feature `cudarc`): its contexts,
//! streams and buffers used by cudagraph's DAGs.
//!
//! - **One context.** cudarc's [`CudaContext::new`] retains the driver's primary context of its
//!   ordinal, the context the CUDA runtime (which cudagraph calls) uses for that device, and
//!   that [`Device`] retains for its driver calls. [`Device::from_cudarc`] opens the device of a
//!   cudarc context and checks that both name the same context; a non-primary context
//!   (`new_non_primary`, `new_cig`, `from_raw_context`) is refused ([`Error::Cudarc`]): memory,
//!   streams and modules of another context are not usable in the runtime's.
//! - **Buffers change hands; they are not shared.** [`DeviceBuffer::from_cudarc`] takes a
//!   [`CudaSlice`] by value, after the cudarc work that uses it (its read and write events, its
//!   stream) has completed, and keeps it inside the buffer's reference-counted allocation: graph
//!   nodes and `Exec`s keep it alive as they keep the crate's own buffers, and it is dropped
//!   (cudarc frees it on its stream) only after the queued GPU work that uses it has completed.
//!   Sharing a slice (`&CudaSlice`, `Arc<CudaSlice>`, a `CudaView`) with a DAG would not be
//!   sound: cudarc orders its operations on a slice by events it records in the slice, which a
//!   graph launch cannot record from outside cudarc without `&mut` access to the slice at every
//!   launch, so cudarc's safe API could read or write (or free) memory a queued launch writes;
//!   a view borrows its slice for a lifetime that a DAG outlives. While the crate holds the
//!   slice, cudarc's API cannot reach it; [`DeviceBuffer::into_cudarc`] hands it back once no
//!   DAG or `Exec` refers to the buffer and the GPU work using it has completed.
//! - **Streams are shared.** [`Stream::from_cudarc`] wraps a cudarc [`CudaStream`] (keeping it
//!   alive; never destroying it), so an `Exec` launches on it and the crate's stream operations
//!   queue on it. Work cudarc queues on the same stream is, for the crate, like work queued
//!   through [`Stream::raw`]: a wait for a graph launch may include it (longer, never shorter).
//!   The per-thread and legacy stream names are refused: one handle must be one stream.

pub(crate) mod function;
pub(crate) mod lent;

pub use lent::{Lend, Lent, LentLaunches};

use std::any::Any;
use std::sync::Arc;

use ::cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtrMut, DriverError};

use crate::device::{Device, Owner};
use crate::error::{Error, Result};
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, MemorySpace};
use crate::stream::queue::StreamQueue;
use crate::stream::track::GpuUses;
use crate::stream::Stream;
use crate::sys;

/// A cudarc call's failure as the crate's error.
fn cudarc_call(call: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |e| Error::CudarcCall {
        call,
        message: e.to_string(),
    }
}

/// The stream names that are not one stream: `CU_STREAM_LEGACY` (1) and `CU_STREAM_PER_THREAD`
/// (2). A per-thread name means another stream on every thread, so the crate's record of what
/// was queued last on "the" stream (markers recorded after a launch) would be wrong.
fn check_stream_handle(raw: usize) -> Result<()> {
    let name = match raw {
        1 => "CU_STREAM_LEGACY",
        2 => "CU_STREAM_PER_THREAD (CudaContext::per_thread_stream)",
        _ => return Ok(()),
    };
    Err(Error::Cudarc {
        what: "Stream::from_cudarc",
        problem: format!(
            "the stream is {name}, a name rather than one stream; use a stream of \
             CudaContext::new_stream (or the default stream)"
        ),
    })
}

/// An error unless a cudarc context (of `ordinal`) is a primary context.
fn check_primary(what: &'static str, ordinal: usize, is_primary: bool) -> Result<()> {
    if is_primary {
        return Ok(());
    }
    Err(Error::Cudarc {
        what,
        problem: format!(
            "the cudarc context of device {ordinal} is not its primary context \
             (CudaContext::new_non_primary, new_cig or from_raw_context): cudagraph works in \
             the primary context, and memory, streams and modules of another context are not \
             usable there; use CudaContext::new({ordinal})"
        ),
    })
}

/// An error unless a cudarc context's handle `ctx` is the primary context `primary` of the
/// device opened for it.
fn check_same_context(
    what: &'static str,
    ordinal: usize,
    ctx: usize,
    primary: usize,
) -> Result<()> {
    if ctx == primary {
        return Ok(());
    }
    Err(Error::Cudarc {
        what,
        problem: format!(
            "the cudarc context {ctx:#x} says it is primary, but device {ordinal}'s primary \
             context is {primary:#x}"
        ),
    })
}

impl Device {
    /// The device of a cudarc context, which must be its device's primary context (what
    /// [`CudaContext::new`] retains): cudagraph's objects of this device and cudarc's objects
    /// of `ctx` then live in one context, and each side may use the other's memory and streams.
    ///
    /// A non-primary context is refused with [`Error::Cudarc`]. Objects of one device used
    /// with another are refused where they meet, as for the crate's own objects
    /// ([`Error::WrongDevice`]: a buffer of device 1 in a DAG instantiated on device 0 without
    /// peer access, a graph launched on a stream of another device).
    pub fn from_cudarc(ctx: &Arc<CudaContext>) -> Result<Device> {
        let what = "Device::from_cudarc";
        check_primary(what, ctx.ordinal(), ctx.is_primary())?;
        let device = Device::get(ctx.ordinal())?;
        let primary = device.primary_context()?;
        check_same_context(what, ctx.ordinal(), ctx.cu_ctx() as usize, primary as usize)?;
        Ok(device)
    }
}

impl Stream {
    /// A cudagraph stream on a cudarc stream (the same CUDA stream, kept alive by the returned
    /// value and its clones, and never destroyed by them): launch an [`Exec`](crate::Exec) on
    /// it, or queue the crate's stream operations on it, in order with the work cudarc queues
    /// there.
    ///
    /// Wrap a stream once and keep the result: the crate tracks what it queued last on each
    /// `Stream` (a graph launch's marker follows it directly), and work queued on the same CUDA
    /// stream by cudarc or through another wrapper is unseen, as work queued through
    /// [`Stream::raw`] is: a wait for a launch may then include it (longer, never shorter).
    ///
    /// Refused ([`Error::Cudarc`]): a stream of a non-primary context, and the per-thread and
    /// legacy stream names ([`CudaContext::per_thread_stream`]), which are a different stream
    /// on each thread.
    pub fn from_cudarc(stream: &Arc<CudaStream>) -> Result<Stream> {
        let device = Device::from_cudarc(stream.context())?;
        let raw = stream.cu_stream();
        check_stream_handle(raw as usize)?;
        // SAFETY: `raw` is one stream (checked above) of `stream`'s context, the primary
        // context of `device` (checked by `from_cudarc`); the queue holds a clone of `stream`,
        // which keeps the handle valid (cudarc destroys an owned stream only when its last
        // `Arc` goes, and a borrowed one's owner promised cudarc as much).
        let inner = unsafe {
            StreamQueue::borrowed(
                &device,
                raw as sys::cudaStream_t,
                Box::new(Arc::clone(stream)),
            )
        };
        Ok(Stream { inner })
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Takes a cudarc buffer: the returned buffer is the same device memory, usable wherever a
    /// [`DeviceBuffer`] is (kernel arguments, copy and memset ends, FFT input and output, host
    /// copies), and kept alive by the DAGs and `Exec`s that refer to it.
    ///
    /// First waits on the host for the cudarc work that uses the slice: the slice's stream is
    /// made to wait for the reads and writes cudarc recorded on it (its multi-stream event
    /// tracking), then synchronised. The slice is dropped (cudarc frees it on its stream) after
    /// the last buffer, DAG and `Exec` referring to it are gone and the GPU work using it has
    /// completed; [`DeviceBuffer::into_cudarc`] hands it back instead.
    ///
    /// Refused: a slice of a non-primary context ([`Error::Cudarc`]); a failure of cudarc's
    /// waits ([`Error::CudarcCall`], which includes an error cudarc kept in the context from an
    /// earlier call that could not return one).
    ///
    /// The README's example ("Using it with cudarc"):
    ///
    /// ```no_run
    /// use cudagraph::cudarc::driver::CudaContext;
    /// use cudagraph::{args, Dag, Device, DeviceBuffer, LaunchConfig, Module, Stream};
    ///
    /// fn main() -> anyhow::Result<()> {
    ///     let ctx = CudaContext::new(0)?;
    ///     let cs = ctx.new_stream()?;
    ///     let x = DeviceBuffer::from_cudarc(cs.clone_htod(&vec![1.0f32; 1024])?)?; // moved in
    ///     let device = Device::from_cudarc(&ctx)?;                                // same context
    ///     let scale = Module::from_source(
    ///         &device,
    ///         r#"extern "C" __global__ void scale(float* x, float a, int n) {
    ///                int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }"#,
    ///     )?
    ///     .kernel("scale")?;
    ///     let mut dag = Dag::new();
    ///     dag.add_kernel(&scale, LaunchConfig::for_elements(1024, 256), &args![&x, 2.0f32, 1024i32])?;
    ///     let mut exec = dag.instantiate(&device)?;
    ///     let stream = Stream::from_cudarc(&cs)?;                                 // cudarc's stream
    ///     exec.launch(&stream)?;
    ///     drop((exec, dag));
    ///     let x = x.into_cudarc().map_err(|(_, e)| e)?;                           // back to cudarc
    ///     assert!(cs.clone_dtoh(&x)?.iter().all(|&v| v == 2.0));
    ///     Ok(())
    /// }
    /// ```
    pub fn from_cudarc(mut slice: CudaSlice<T>) -> Result<Self> {
        let device = Device::from_cudarc(slice.context())?;
        let stream = Arc::clone(slice.stream());
        let ptr = {
            // Makes `stream` wait for every read and write cudarc recorded on the slice (a
            // write event is recorded when `_record` drops: nothing was queued in between).
            let (ptr, _record) = slice.device_ptr_mut(&stream);
            ptr
        };
        stream
            .synchronize()
            .map_err(cudarc_call("CudaStream::synchronize"))?;
        // cudarc keeps the failures of its event waits in the context.
        stream
            .context()
            .check_err()
            .map_err(cudarc_call("CudaContext::check_err"))?;
        let len = slice.len();
        let bytes = slice.num_bytes();
        Ok(device_buffer_of(device, ptr, bytes, len, Box::new(slice)))
    }

    /// Hands back the cudarc buffer this buffer was made from ([`DeviceBuffer::from_cudarc`]),
    /// after the GPU work that uses it has completed (waited for on the host).
    ///
    /// Refused, with the buffer given back ([`Error::Cudarc`]): while a DAG, an `Exec` or a
    /// [`Region`](crate::Region) still refers to the buffer (drop them first), and for a buffer
    /// the crate allocated itself. Such a buffer cannot become a `CudaSlice`: cudarc frees a
    /// slice with `cuMemFreeAsync` on the slice's stream and adopts foreign memory only through
    /// an `unsafe` call, so the buffer's memory would be freed twice or by the wrong allocator.
    pub fn into_cudarc(mut self) -> std::result::Result<CudaSlice<T>, (Self, Error)> {
        match take_foreign::<CudaSlice<T>>(&mut self.alloc, "DeviceBuffer::into_cudarc") {
            Ok(slice) => Ok(slice),
            Err(e) => Err((self, e)),
        }
    }
}

/// A buffer of `len` elements over `bytes` of `device`'s memory at `ptr`, which `owner` (a
/// cudarc slice, or the mark of lent memory) stands for: the crate frees nothing of it.
fn device_buffer_of<T: DeviceRepr>(
    device: Device,
    ptr: u64,
    bytes: usize,
    len: usize,
    owner: Box<dyn Any + Send + Sync>,
) -> DeviceBuffer<T> {
    let alloc = Allocation {
        ptr,
        bytes,
        space: MemorySpace::Device,
        owner: Owner::Cuda(device),
        uses: GpuUses::default(),
        foreign: Some(owner),
    };
    DeviceBuffer::from_alloc(Arc::new(alloc), len)
}

/// Takes the foreign owner of type `S` out of an allocation nobody else refers to, after the
/// GPU work using it has completed; the allocation is left empty (address 0, nothing to free).
fn take_foreign<S: Any>(alloc: &mut Arc<Allocation>, what: &'static str) -> Result<S> {
    let Some(a) = Arc::get_mut(alloc) else {
        return Err(Error::Cudarc {
            what,
            problem: "a DAG, an Exec or a Region still refers to the buffer (drop them first)"
                .into(),
        });
    };
    if !a.foreign.as_ref().is_some_and(|f| (**f).is::<S>()) {
        return Err(Error::Cudarc {
            what,
            problem: "the buffer was not made from a cudarc slice of this type \
                      (DeviceBuffer::from_cudarc); cudagraph's own allocations cannot become \
                      cudarc slices"
                .into(),
        });
    }
    crate::stream::track::with_gpu_idle(what, [&a.uses], || ())?;
    let owner = a.foreign.take().expect("checked above");
    // Nothing left to free: the allocation's `Drop` returns at the zero address.
    a.ptr = 0;
    a.bytes = 0;
    Ok(*owner.downcast::<S>().expect("checked above"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dag::{Dag, RecordingBackend};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts its drops.
    #[derive(Debug)]
    struct Owned(Arc<AtomicUsize>);
    impl Drop for Owned {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A recording backend's buffer standing for one taken from another library.
    fn foreign_buffer(rec: &mut RecordingBackend, drops: &Arc<AtomicUsize>) -> DeviceBuffer<f32> {
        let mut b = rec.device_buffer::<f32>(16);
        Arc::get_mut(&mut b.alloc).expect("new").foreign = Some(Box::new(Owned(drops.clone())));
        b
    }

    #[test]
    fn lent_memory_is_refused_by_stream_launches_but_taken_by_graph_nodes() {
        let mut rec = RecordingBackend::new(crate::DeviceLimits::hopper());
        let mut b = rec.device_buffer::<f32>(16);
        let k = rec.kernel("k", &[8]);
        assert!(k.args_problem(&crate::args![&b]).is_none(), "own memory");
        Arc::get_mut(&mut b.alloc).expect("new").foreign =
            Some(Box::new(crate::memory::LentMemory));
        assert!(b.alloc.is_lent());
        let problem = k.args_problem(&crate::args![&b]).expect("refused");
        assert!(problem.contains("lent by cudarc"), "{problem}");
        // A graph node takes it (its launches bind the slice).
        let mut dag = Dag::new();
        dag.add_kernel(&k, crate::LaunchConfig::new(1, 1), &crate::args![&b])
            .unwrap();
    }

    #[test]
    fn a_function_is_given_to_the_driver_as_func_in_no_context() {
        let f = 0x1234usize as *mut std::ffi::c_void;
        let p = sys::cudaKernelNodeParams {
            func: f,
            gridDim: sys::dim3 { x: 2, y: 1, z: 1 },
            blockDim: sys::dim3 { x: 64, y: 1, z: 1 },
            sharedMemBytes: 0,
            kernelParams: std::ptr::null_mut(),
            extra: std::ptr::null_mut(),
        };
        let d = crate::result::driver::kernel_node_params(&p, std::ptr::null_mut());
        assert_eq!((d.func.cast(), d.kern), (f, std::ptr::null_mut()));
        assert_eq!((d.gridDimX, d.blockDimX), (2, 64));
        // A library kernel is given as `kern` with its context.
        let ctx = 0x99usize as sys::CUcontext;
        let d = crate::result::driver::kernel_node_params(&p, ctx);
        assert_eq!(
            (d.func, d.kern.cast(), d.ctx),
            (std::ptr::null_mut(), f, ctx)
        );
    }

    #[test]
    fn per_thread_and_legacy_stream_names_are_refused() {
        for raw in [1usize, 2] {
            let e = check_stream_handle(raw).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::Cudarc {
                        what: "Stream::from_cudarc",
                        ..
                    }
                ),
                "{e}"
            );
        }
        assert!(check_stream_handle(2)
            .unwrap_err()
            .to_string()
            .contains("PER_THREAD"));
        check_stream_handle(0).unwrap(); // the default stream: one stream
        check_stream_handle(0x7f00_1234_5000).unwrap();
    }

    #[test]
    fn a_non_primary_or_other_context_is_refused() {
        let e = check_primary("Device::from_cudarc", 1, false).unwrap_err();
        assert!(matches!(e, Error::Cudarc { .. }));
        assert!(e.to_string().contains("not its primary context"), "{e}");
        assert!(e.to_string().contains("CudaContext::new(1)"), "{e}");
        check_primary("Device::from_cudarc", 1, true).unwrap();
        let e = check_same_context("Device::from_cudarc", 0, 0x10, 0x20).unwrap_err();
        assert!(matches!(e, Error::Cudarc { .. }));
        assert!(e.to_string().contains("primary context is 0x20"), "{e}");
        check_same_context("Device::from_cudarc", 0, 0x10, 0x10).unwrap();
    }

    #[test]
    fn the_dag_keeps_a_foreign_owner_alive() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut rec = RecordingBackend::new(crate::DeviceLimits::hopper());
        let b = foreign_buffer(&mut rec, &drops);
        let mut dag = Dag::new();
        dag.add_memset(&b, 0u8).unwrap();
        drop(b);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "dropped while the DAG refers to it"
        );
        let copy = dag.clone();
        drop(dag);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "dropped while a copy refers to it"
        );
        drop(copy);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "dropped once, with the last reference"
        );
    }

    #[test]
    fn a_foreign_owner_is_handed_back_only_when_nothing_refers_to_it() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut rec = RecordingBackend::new(crate::DeviceLimits::hopper());
        let mut b = foreign_buffer(&mut rec, &drops);
        let mut dag = Dag::new();
        dag.add_memset(&b, 0u8).unwrap();
        let e = take_foreign::<Owned>(&mut b.alloc, "t").unwrap_err();
        assert!(e.to_string().contains("still refers"), "{e}");
        drop(dag);
        let e = take_foreign::<String>(&mut b.alloc, "t").unwrap_err();
        assert!(
            e.to_string().contains("not made from a cudarc slice"),
            "{e}"
        );
        let owned = take_foreign::<Owned>(&mut b.alloc, "t").unwrap();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        assert_eq!(b.alloc.ptr, 0, "nothing left to free");
        drop(b);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the buffer no longer owns it"
        );
        drop(owned);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        // The crate's own buffers have no owner to hand back.
        let mut own = rec.device_buffer::<f32>(4);
        assert!(take_foreign::<Owned>(&mut own.alloc, "t").is_err());
    }
}
