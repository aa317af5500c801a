//! FFTs executed directly on a stream, outside any graph.

use std::ffi::c_void;
use std::sync::Arc;

use super::handle::{launch_packed, setter_launch, Handle};
use super::{
    check_transform, decide_fusion, planned_in_form, Direction, FftParams, FftPlan, FusionDecision,
    Unfused, PARAM_BLOB,
};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{LaunchConfig, PackedArgs};
use crate::memory::{Allocation, MemorySpace, Region};
use crate::result::{cufft as cf, runtime as rt};
use crate::stream::queue::Queued;
use crate::stream::track;
use crate::stream::Stream;

/// One cuFFT plan made from an [`FftPlan`], executed directly on streams: the baseline FFT
/// nodes are measured against, and a way to run a transform outside a graph.
///
/// It owns its cuFFT handle, work area and callback-parameter buffer. [`StreamFft::exec`]
/// queues a parameter write (a kernel launch, whose arguments CUDA copies at launch, so each
/// call's parameters stay with it) followed by the transform. A plan with a load callback
/// runs in the form an FFT node of the same plan would
/// ([`decide_fusion`], [`StreamFft::fusion`]): unfused, a conversion
/// kernel (with built-in load parameters as its arguments; a custom callback reads them from
/// the parameter buffer, written first) writes the `StreamFft`'s own scratch buffer before
/// the transform. The regions may be dropped at
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
    /// The form, and why.
    decision: FusionDecision,
    /// Unfused: the conversion kernel and scratch buffer, and the kernel's packed arguments.
    convert: Option<(Unfused, PackedArgs)>,
    /// The stream the handle is bound to (rebinding costs a call, so only on change); `Drop`
    /// waits for it.
    bound: Option<Stream>,
}

impl StreamFft {
    /// Makes the cuFFT plan (with its callbacks) on `device`.
    pub fn new(device: &Device, plan: &FftPlan) -> Result<StreamFft> {
        device.bind()?;
        let decision = decide_fusion(device, plan)?;
        let form = decision.form;
        let (unfused, handle, params, need) = planned_in_form(device, plan, form)?;
        let work = Allocation::new(device, need.max(16), MemorySpace::Device)?;
        // SAFETY: the work area is large enough and owned by `self`.
        unsafe { cf::set_work_area(handle.raw(), work.ptr as *mut c_void)? };
        let (setter, setter_kernel) = match &params {
            Some(p) => {
                let (args, k) =
                    setter_launch(device, p.ptr, [0u8; PARAM_BLOB], plan.setter_bytes(form))?;
                (Some(args), Some(k))
            }
            None => (None, None),
        };
        let convert = match unfused {
            Some(u) => {
                let load = u.load_arg(params.as_ref().map(|p| p.ptr), &FftParams::none());
                let args = u.packed(0, load)?;
                Some((u, args))
            }
            None => None,
        };
        Ok(StreamFft {
            plan: plan.clone(),
            device: device.clone(),
            handle,
            _params: params,
            setter,
            setter_kernel,
            _work: work,
            decision,
            convert,
            bound: None,
        })
    }

    /// The form this `StreamFft` runs in (the one FFT nodes of the same plan are lowered in
    /// on this device), and why.
    pub fn fusion(&self) -> FusionDecision {
        self.decision
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
        if super::transform_regions(input, output, params).any(|r| r.alloc.is_lent()) {
            return Err(Error::WrongDevice {
                node: Some("StreamFft".into()),
                problem: "an FFT buffer is memory lent by cudarc (a Lent), which only graph \
                          launches that bind its slice use (Exec::launch_lent)"
                    .into(),
            });
        }
        stream.check_device(&self.device, "the StreamFft")?;
        if self.bound.as_ref().map(Stream::raw) != Some(stream.raw()) {
            // Work queued on the previous stream may still use the work area and parameters:
            // waited for before any lock is taken (no lock is held across this wait).
            crate::stream::track::check_not_in_helper("StreamFft::exec")?;
            if let Some(prev) = &self.bound {
                prev.synchronize()?;
            }
            // SAFETY: both are live.
            unsafe { cf::set_stream(self.handle.raw(), stream.raw())? };
            self.bound = Some(stream.clone());
        }
        // Locked before queuing, marked before unlocking: ordered with the synchronous helpers.
        let mut uses = track::lock_all(
            "StreamFft::exec",
            super::transform_regions(input, output, params).map(|r| &r.alloc.uses),
        )?;
        let tail = stream.queue()?;
        // The setter, the conversion and the transform, in order; an error after one of them
        // was queued still marks what was (it runs, and uses the regions).
        let queued = (|| -> Result<()> {
            // The setter first: a custom load callback's conversion reads the parameter buffer.
            if let (Some(packed), Some(k)) = (&mut self.setter, &self.setter_kernel) {
                packed.set_bytes(1, &self.plan.setter_blob(self.decision.form, params));
                // SAFETY: the setter's arguments match its layout (checked at construction);
                // the parameter buffer is owned by `self`.
                unsafe { launch_packed(k, LaunchConfig::new(1, 32), packed, tail.raw())? };
            }
            if let Some((u, args)) = &mut self.convert {
                args.set_bytes(1, &input.raw_addr().to_ne_bytes());
                if !u.custom {
                    args.set_bytes(2, &FftPlan::load_param_bytes(params));
                }
                // SAFETY: arguments checked at construction, sizes kept; scratch (and
                // parameter) buffers are `self`'s (Drop waits for the stream), sized for the
                // plan; the input and override regions were checked against the plan and get
                // the marker below.
                unsafe { launch_packed(&u.kernel, u.config(), args, tail.raw())? };
            }
            let fft_input = self
                .convert
                .as_ref()
                .map_or(input.raw_addr(), |(u, _)| u.scratch.ptr);
            // Unfused, the transform reads the scratch buffer the conversion just queued
            // wrote.
            // SAFETY: regions checked against the plan; the handle is bound to `stream`; the
            // marker noted below keeps the regions alive, and host access waiting, until it
            // has run.
            unsafe {
                cf::exec(
                    self.handle.raw(),
                    self.plan.inner.desc.kind.raw(),
                    fft_input as *mut c_void,
                    output.raw_addr() as *mut c_void,
                    direction.raw(),
                )
            }
        })();
        match tail.mark_queued() {
            Queued::Marked(m) => {
                uses.add_marker(&m);
                queued
            }
            // What was queued has run: nothing to note.
            Queued::Ran(e) => queued.and(Err(e)),
            Queued::Unknown(e) => {
                // What was queued may still run: what it uses may never be freed, nor accessed
                // by the host.
                uses.add_lost();
                std::mem::forget(Arc::clone(&input.alloc));
                std::mem::forget(Arc::clone(&output.alloc));
                params.for_each_allocation(&mut |a| std::mem::forget(Arc::clone(a)));
                queued.and(Err(e))
            }
        }
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
