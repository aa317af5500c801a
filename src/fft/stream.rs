//! FFTs executed directly on a stream, outside any graph.

use std::ffi::c_void;
use std::sync::Arc;

use super::handle::{planned_handle, setter_kernel, Handle};
use super::{check_transform, Direction, FftParams, FftPlan};
use crate::device::Device;
use crate::error::Result;
use crate::kernel::{KernelArg, LaunchConfig, PackedArgs};
use crate::memory::{Allocation, MemorySpace, Region};
use crate::result::{cufft as cf, runtime as rt};
use crate::stream::Stream;

/// One cuFFT plan made from an [`FftPlan`], executed directly on streams: the baseline FFT
/// nodes are measured against, and a way to run a transform outside a graph.
///
/// It owns its cuFFT handle, work area and callback-parameter buffer. [`StreamFft::exec`]
/// queues a parameter write (a kernel launch, whose arguments CUDA copies at launch, so each
/// call's parameters stay with it) followed by the transform. The regions may be dropped at
/// once: their memory is freed only after the transform has run. Dropping a `StreamFft` waits for the work
/// it queued; moving to another stream waits for the work queued on the previous one.
pub struct StreamFft {
    plan: FftPlan,
    device: Device,
    handle: Handle,
    _params: Option<Arc<Allocation>>,
    setter: Option<PackedArgs>,
    setter_kernel: Option<crate::kernel::Kernel>,
    _work: Arc<Allocation>,
    /// The stream the handle is bound to (rebinding costs a call, so only on change); `Drop`
    /// waits for it.
    bound: Option<Stream>,
}

impl StreamFft {
    /// Makes the cuFFT plan (with its callbacks) on `device`.
    pub fn new(device: &Device, plan: &FftPlan) -> Result<StreamFft> {
        device.bind()?;
        let bytes = plan.param_buffer_bytes();
        let (handle, params, need) = planned_handle(device, plan)?;
        let work = Allocation::new(device, need.max(16), MemorySpace::Device)?;
        // SAFETY: the work area is large enough and owned by `self`.
        unsafe { cf::set_work_area(handle.raw(), work.ptr as *mut c_void)? };
        let (setter, setter_kernel) = match &params {
            Some(p) => {
                let k = setter_kernel(device)?;
                let args = [
                    KernelArg::from(p.ptr),
                    KernelArg::from([0u8; super::PARAM_BLOB]),
                    KernelArg::from(bytes.div_ceil(8) as i32),
                ];
                k.check_args(&args)?;
                (Some(PackedArgs::new(&k, &args)), Some(k))
            }
            None => (None, None),
        };
        Ok(StreamFft {
            plan: plan.clone(),
            device: device.clone(),
            handle,
            _params: params,
            setter,
            setter_kernel,
            _work: work,
            bound: None,
        })
    }

    /// Queues the transform of `input` into `output` on `stream`, with callback `params`
    /// (checked like an FFT node's).
    pub fn exec(
        &mut self,
        stream: &Stream,
        direction: Direction,
        input: &Region,
        output: &Region,
        params: &FftParams,
    ) -> Result<()> {
        check_transform("StreamFft", &self.plan, direction, input, output, params)?;
        super::check_owners("StreamFft", input, output, params, self.device.key())?;
        stream.check_device(&self.device, "the StreamFft")?;
        if self.bound.as_ref().map(Stream::raw) != Some(stream.raw()) {
            // Work queued on the previous stream may still use the work area and parameters.
            if let Some(prev) = &self.bound {
                prev.synchronize()?;
            }
            // SAFETY: both are live.
            unsafe { cf::set_stream(self.handle.raw(), stream.raw())? };
            self.bound = Some(stream.clone());
        }
        if let (Some(packed), Some(k)) = (&mut self.setter, &self.setter_kernel) {
            packed.set_bytes(1, &self.plan.param_blob(params));
            // SAFETY: the setter's arguments match its layout (checked at construction); the
            // parameter buffer is owned by `self`.
            unsafe {
                rt::launch_kernel(
                    k.raw().expect("a loaded kernel") as *const c_void,
                    LaunchConfig::new(1, 32).grid.into(),
                    LaunchConfig::new(1, 32).block.into(),
                    packed.kernel_params(),
                    0,
                    stream.raw(),
                )?
            };
        }
        // SAFETY: the regions were checked against the plan; the handle is bound to `stream`;
        // the marker noted below keeps the regions from being freed, and their host access
        // waiting, until the transform has run.
        unsafe {
            cf::exec(
                self.handle.raw(),
                self.plan.inner.desc.kind.raw(),
                input.raw_addr() as *mut c_void,
                output.raw_addr() as *mut c_void,
                direction.raw(),
            )?
        };
        let m = stream.mark()?;
        input.alloc.uses.add_marker(&m);
        output.alloc.uses.add_marker(&m);
        params.for_each_allocation(&mut |a| a.uses.add_marker(&m));
        Ok(())
    }
}

impl Drop for StreamFft {
    fn drop(&mut self) {
        if let Some(s) = &self.bound {
            // SAFETY: the stream is live (held); waiting makes freeing the handle, work area
            // and parameter buffer safe.
            if let Err(e) = unsafe { rt::stream_synchronize(s.raw()) } {
                self.device.defer("a StreamFft (waiting for its work)", e);
            }
        }
    }
}
