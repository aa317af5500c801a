//! What [`measure_fusion`](super::measure_fusion) runs: each form of a plan on a private
//! stream with scratch buffers ([`Rig`]), captured into a graph of its own ([`Captured`]).

use std::ffi::c_void;
use std::sync::Arc;

use super::{planned_in_form, FftForm, Unfused, ITERS};
use crate::device::Device;
use crate::error::Result;
use crate::fft::handle::{launch_packed, setter_launch, zeroed_device, Handle};
use crate::fft::{FftParams, FftPlan, FftType};
use crate::kernel::{Kernel, LaunchConfig, PackedArgs};
use crate::memory::{Allocation, MemorySpace};
use crate::result::{cufft as cf, runtime as rt};
use crate::stream::Stream;
use crate::sys;

/// One form of a plan, ready to run on a private stream with scratch buffers (for
/// [`measure_fusion`](super::measure_fusion)). Its `Drop` waits for the stream, so nothing it
/// owns is freed while work that uses it may run.
pub(super) struct Rig {
    stream: Stream,
    handle: Handle,
    kind: sys::cufftType,
    direction: i32,
    /// What the transform reads: the packed input (fused) or the scratch buffer (unfused).
    fft_input: u64,
    output: Arc<Allocation>,
    _input: Arc<Allocation>,
    _params: Option<Arc<Allocation>>,
    _work: Arc<Allocation>,
    setter: Option<(PackedArgs, Kernel)>,
    convert: Option<(Unfused, PackedArgs)>,
}

impl Rig {
    pub(super) fn new(
        device: &Device,
        plan: &FftPlan,
        form: FftForm,
        stream: &Stream,
    ) -> Result<Rig> {
        let (unfused, handle, params, need) = planned_in_form(device, plan, form)?;
        let work = Allocation::new(device, need.max(16), MemorySpace::Device)?;
        // SAFETY: the area is as large as the plan needs and owned by the rig, whose Drop
        // waits for the stream the plan runs on; both handles are live.
        unsafe {
            cf::set_work_area(handle.raw(), work.ptr as *mut c_void)?;
            cf::set_stream(handle.raw(), stream.raw())?;
        }
        let input = zeroed_device(device, plan.input_bytes())?;
        let output = zeroed_device(device, plan.output_bytes())?;
        let setter = match &params {
            Some(p) => Some(setter_launch(
                device,
                p.ptr,
                [0; crate::fft::PARAM_BLOB],
                plan.setter_bytes(form),
            )?),
            None => None,
        };
        let convert = match unfused {
            Some(u) => {
                let load = u.load_arg(params.as_ref().map(|p| p.ptr), &FftParams::none());
                let a = u.packed(input.ptr, load)?;
                Some((u, a))
            }
            None => None,
        };
        let kind = plan.desc().kind;
        Ok(Rig {
            stream: stream.clone(),
            handle,
            kind: kind.raw(),
            direction: if kind == FftType::C2R {
                crate::fft::Direction::Inverse.raw()
            } else {
                crate::fft::Direction::Forward.raw()
            },
            fft_input: convert.as_ref().map_or(input.ptr, |(u, _)| u.scratch.ptr),
            output,
            _input: input,
            _params: params,
            _work: work,
            setter,
            convert,
        })
    }

    /// Queues one transform in this form (the node's kernels, then the plan) on the rig's
    /// stream.
    pub(super) fn issue(&self) -> Result<()> {
        let s = self.stream.raw();
        // The setter runs first: a custom conversion reads the parameter buffer.
        // SAFETY: arguments checked and packed for their kernels; each address is an allocation
        // of this rig, sized for the plan, kept alive by its Drop until the stream finished.
        unsafe {
            if let Some((args, k)) = &self.setter {
                launch_packed(k, LaunchConfig::new(1, 32), args, s)?;
            }
            if let Some((u, args)) = &self.convert {
                launch_packed(&u.kernel, u.config(), args, s)?;
            }
        }
        // SAFETY: the handle is made, bound to the rig's stream and has its work area; input
        // and output are rig allocations of the sizes the plan needs (zero parameters: the
        // callbacks read `dataIn`/`dataOut`).
        unsafe {
            cf::exec(
                self.handle.raw(),
                self.kind,
                self.fft_input as *mut c_void,
                self.output.ptr as *mut c_void,
                self.direction,
            )
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        // SAFETY: the stream is live (held); waiting makes freeing the rig's buffers safe.
        if let Err(e) = unsafe { rt::stream_synchronize(self.stream.raw()) } {
            self.stream.device().defer("an FFT fusion measurement", e);
        }
    }
}

/// `ITERS` transforms of one rig captured into a graph of their own, instantiated. Its `Drop`
/// waits for the stream, then destroys both.
pub(super) struct Captured {
    stream: Stream,
    graph: sys::cudaGraph_t,
    exec: sys::cudaGraphExec_t,
}

impl Captured {
    pub(super) fn new(rig: &Rig, stream: &Stream) -> Result<Captured> {
        // SAFETY: the graph is owned by the value returned (or destroyed below on failure).
        let graph = unsafe { rt::graph_create()? };
        let mut c = Captured {
            stream: stream.clone(),
            graph,
            exec: std::ptr::null_mut(),
        };
        // SAFETY: stream and graph are live; no dependencies.
        unsafe {
            rt::stream_begin_capture_to_graph(
                stream.raw(),
                graph,
                &[],
                sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
            )?
        };
        let issued = (0..ITERS).try_for_each(|_| rig.issue());
        // SAFETY: always end the capture we began.
        let ended = unsafe { rt::stream_end_capture(stream.raw()) };
        issued?;
        ended?;
        // SAFETY: the graph is live and complete.
        c.exec = unsafe { rt::graph_instantiate(graph, 0)? };
        Ok(c)
    }

    pub(super) fn launch(&self) -> Result<()> {
        // SAFETY: the exec is live; what it uses belongs to the rig it was captured from,
        // which outlives this value (declared before it) and waits for the stream when
        // dropped.
        unsafe { rt::graph_launch(self.exec, self.stream.raw()) }
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        // SAFETY: live handles owned by this value; the launches have completed once the
        // stream is synchronised.
        unsafe {
            let _ = rt::stream_synchronize(self.stream.raw());
            if !self.exec.is_null() {
                let _ = rt::graph_exec_destroy(self.exec);
            }
            let _ = rt::graph_destroy(self.graph);
        }
    }
}
