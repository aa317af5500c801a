//! FFT nodes on the recording backend: each FFT's parameter-setting kernel node and its
//! captured transform recorded, with numbered stand-ins for cuFFT plans, work areas and
//! streams.

use super::*;

impl RecordingBackend {
    /// Records FFT node `f`'s parameter-setting kernel node (handle `#handle`) after `deps`
    /// and its parameter buffer; returns the node and the buffer's address (`None` without a
    /// buffer).
    fn record_fft_setter(
        &mut self,
        name: &NodeName<'_>,
        deps: &[usize],
        handle: u64,
        f: &FftNode,
    ) -> Option<(usize, u64)> {
        let plan = f.plan();
        let form = crate::fft::recording_decision(plan).form;
        let bytes = plan.setter_bytes(form);
        if bytes == 0 {
            return None;
        }
        let buf = self.placeholder(bytes, MemorySpace::Device);
        let blob = plan.setter_blob(form, f.params());
        let p = format!(
            "kernel=cudagraph_fft_set_params handle=#{handle} param_buffer={:#x} bytes={bytes} params={}",
            buf.ptr,
            hex(&blob[..bytes])
        );
        let ptr = buf.ptr;
        self.fft_param_buffers.push(buf);
        Some((
            self.record("cudaGraphAddNode", "kernel", name, deps, Params::Words(p)),
            ptr,
        ))
    }

    pub(super) fn add_fft(
        &mut self,
        name: &NodeName<'_>,
        deps: &[usize],
        f: &FftNode,
        work: &WorkShare,
    ) -> Result<usize> {
        // What the CUDA backend does, per node: its own cuFFT handle and parameter buffer, a
        // kernel node writing the parameters, then the captured transform; unfused, also a
        // conversion kernel node writing the node's own scratch buffer, which the transform
        // reads. `Fusion::Auto` is fused here: this backend cannot time (and reads neither the
        // environment nor the on-disk decisions), so transcripts are deterministic.
        self.fft.capture_stream(&mut self.fft_made)?;
        let state = self.fft.take_prepared(f.uid);
        let handle = state.inner;
        self.fft.push_lowered(state, ());
        let plan = f.plan();
        let decision = crate::fft::recording_decision(plan);
        let form = decision.form;
        let mut capture_deps = Vec::new();
        let mut input = f.input.raw_addr();
        let unfused = match (form, plan.unfused_plan(), &plan.desc().load) {
            (FftForm::Unfused, Some(inner), Some(load)) => Some((inner, load)),
            _ => None,
        };
        // With a custom load callback the conversion reads the parameter buffer through
        // `callerInfo`: the setter first, the conversion after it (the transform after that).
        let custom = unfused.is_some() && plan.custom_load();
        let mut setter = None;
        if custom {
            setter = self.record_fft_setter(name, deps, handle, f);
        }
        if let Some((inner, load)) = unfused {
            let elems = plan.inner.in_elems;
            let scratch = self.placeholder(inner.input_bytes(), MemorySpace::Device);
            let cfg = crate::fft::convert_config(elems);
            let (load_arg, after) = match setter {
                Some((node, buf)) => (format!("info={buf:#x}"), vec![node]),
                None if custom => ("info=0x0".to_string(), deps.to_vec()),
                None => (
                    format!("params={}", hex(&FftPlan::load_param_bytes(f.params()))),
                    deps.to_vec(),
                ),
            };
            let p = format!(
                "kernel={} handle=#{handle} grid={} block={} in={input:#x} scratch={:#x} elems={elems} {load_arg}",
                crate::fft::handle::convert_source(load, plan.desc().kind).0,
                cfg.grid,
                cfg.block,
                scratch.ptr,
            );
            capture_deps.push(self.record(
                "cudaGraphAddNode",
                "kernel",
                name,
                &after,
                Params::Words(p),
            ));
            input = scratch.ptr;
            self.fft_param_buffers.push(scratch);
        }
        if !custom {
            if let Some((node, _)) = self.record_fft_setter(name, deps, handle, f) {
                capture_deps.push(node);
            }
        }
        if capture_deps.is_empty() {
            capture_deps = deps.to_vec();
        }
        let d = plan.desc();
        let mut words = format!(
            "handle=#{handle} plan={:?}{:?}x{} dir={:?} in={input:#x} out={:#x} work_slot={}",
            d.kind,
            d.sizes,
            d.batch,
            f.direction(),
            f.output.raw_addr(),
            work.slot
        );
        if plan.has_unfused_form() {
            words.push_str(&format!(" form={}", decision.describe()));
        }
        Ok(self.record(
            "cudaStreamBeginCaptureToGraph+cufftExec",
            "captured",
            name,
            &capture_deps,
            Params::Words(words),
        ))
    }
}

/// The recording backend's FFT state: a numbered stand-in per plan, work areas as addresses
/// and sizes, a numbered stream.
pub(crate) enum RecordedFft {}

impl FftKit for RecordedFft {
    /// The handle's number (`handle=#N` in the transcript).
    type State = u64;
    /// Address and bytes.
    type Area = (u64, usize);
    /// The stream's number.
    type Stream = u64;
    type Extra = ();
    fn area_bytes(area: &(u64, usize)) -> usize {
        area.1
    }
}

/// Numbers what a recording backend's FFT states hold, and counts what it made (the CUDA
/// backend would make a cuFFT plan, a device allocation, a stream for each).
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecordedFftMaker {
    next_handle: u64,
    next_area: u64,
    next_stream: u64,
    /// Plans made.
    pub(crate) plans: usize,
    /// Work areas allocated.
    pub(crate) areas: usize,
    /// Capture streams made.
    pub(crate) streams: usize,
}

impl RecordedFftMaker {
    /// The maker of a child graph's lowering: numbers go on from this one's, nothing counted.
    pub(super) fn for_child(&self) -> RecordedFftMaker {
        RecordedFftMaker {
            plans: 0,
            areas: 0,
            streams: 0,
            ..*self
        }
    }

    /// Adds what a child graph's lowering made, and goes on from its numbers.
    pub(super) fn count_child(&mut self, child: &RecordedFftMaker) {
        *self = RecordedFftMaker {
            plans: self.plans + child.plans,
            areas: self.areas + child.areas,
            streams: self.streams + child.streams,
            ..*child
        };
    }
}

impl FftMaker<RecordedFft> for RecordedFftMaker {
    fn state(&mut self, f: &FftNode) -> Result<(u64, usize)> {
        self.plans += 1;
        self.next_handle += 1;
        // Work bytes as a plan might need them: grows with the transform.
        Ok((self.next_handle, f.plan.inner.in_elems.max(1) as usize * 16))
    }
    fn area(&mut self, bytes: usize) -> Result<(u64, usize)> {
        self.areas += 1;
        self.next_area += 1;
        Ok((0x5000_0000_0000 + (self.next_area << 32), bytes))
    }
    fn attach(&mut self, _: &u64, _: &(u64, usize)) -> Result<()> {
        Ok(())
    }
    fn stream(&mut self) -> Result<u64> {
        self.streams += 1;
        self.next_stream += 1;
        Ok(self.next_stream)
    }
}

#[cfg(test)]
impl RecordingBackend {
    /// What the FFT states of the lowerings so far made.
    pub(crate) fn fft_made(&self) -> RecordedFftMaker {
        self.fft_made
    }

    /// Takes the FFT states of the lowering, and the reused context with what it did not take
    /// (the parts of an `Exec`'s update: `LoweredGraph::fft_capture` and `leftover`).
    pub(crate) fn take_fft_states(
        &mut self,
    ) -> (FftStates<RecordedFft>, Option<FftStates<RecordedFft>>) {
        let mut states = std::mem::take(&mut self.fft);
        let old = states.take_reuse();
        (states, old)
    }

    /// Lowers next with the unchanged FFT states of `old` (as `Exec::update` does).
    pub(crate) fn reuse_fft_states(&mut self, old: FftStates<RecordedFft>) {
        self.fft.set_reuse(old);
    }
}
