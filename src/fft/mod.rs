//! FFT nodes: cuFFT transforms as DAG nodes, with reusable plans, per-node callback
//! parameters and no shared mutable state between nodes.
//!
//! # The model
//! - An [`FftPlan`] is a *description* (rank, sizes, batch, layout, type, callbacks), cheap to
//!   clone and shared by any number of nodes of any number of DAGs.
//! - [`Dag::add_fft`](crate::Dag::add_fft) adds a node: plan, direction, input and output regions and the node's
//!   callback parameters ([`FftParams`]).
//! - Lowering gives **every FFT node its own cuFFT handle** (callbacks are attached to a handle
//!   before its plan is made and cannot change afterwards) and **its own device buffer for the
//!   callback parameters** (the `caller_info` the callbacks read). Nothing mutable is shared
//!   between two nodes, or between two executable graphs made from one DAG.
//! - The parameter values reach that buffer through a small kernel node placed just before the
//!   transform in the graph, whose *arguments* are the values. Kernel-node arguments are copied
//!   by CUDA when set, so [`Exec::set_fft_params`](crate::Exec::set_fft_params) affects only
//!   launches issued after it, even while earlier launches are still queued, with no host
//!   synchronisation.
//! - Work areas: nodes that the DAG orders may share one; nodes that may run at the same time
//!   never do.
//!
//! # How a node is lowered (the crate's only use of stream capture, invisible to users)
//! cuFFT has no explicit-node API, so the transform is captured: the plan is bound to a private
//! stream, executed once outside capture on scratch buffers (so that lazy initialisation does
//! not happen inside the capture), then `cufftExec*` is captured straight into the graph being
//! built with `cudaStreamBeginCaptureToGraph`, after the node's dependencies. Lowering checks
//! that the capture added nodes.
//!
//! # Callbacks
//! cuFFT LTO callbacks: CUDA C++ compiled by NVRTC to LTO-IR (cached per source and
//! architecture) and attached with `cufftXtSetJITCallback`. Built-ins ([`LoadCallback`],
//! [`StoreCallback`]) cover 8/16-bit integer input with a scale, and scaled or detected-power
//! (|X|²) output, optionally accumulated. Each built-in reads `{ float scale; unsigned flags;
//! unsigned long long ptr; }` from its parameter buffer; a non-zero `ptr` overrides the
//! input (load) or output (store) address, so the data location can change per launch.
//! LTO callbacks need libnvJitLink at run time; without it, callback plans fail with an error
//! that says so, and plain FFT nodes still work.
//!
//! # Fused and unfused loads
//! A plan with a load callback has two forms ([`Fusion`], chosen per plan with
//! [`FftPlanDesc::with_fusion`]): *fused*, the callback inside the transform; *unfused*, a
//! conversion kernel node (for a built-in, generated from the same callback template, taking
//! the same parameter struct by value, so both forms compute the same values, layouts and strides
//! included) writing float data to the node's own scratch buffer, then the plan without the
//! load callback (the store callback stays). Neither is always faster (with cuFFT 12.0 the LTO
//! load callback slows large batches of 4096-point transforms down by more than the
//! conversion costs), so the default, [`Fusion::Auto`], measures both once per shape and
//! keeps the faster, remembered per process and on disk ([`decide_fusion`]). The decision is
//! made where the plans are made: in the prepare pass of lowering (outside any capture) and
//! in [`StreamFft::new`]. [`Exec::fft_fusion`](crate::Exec::fft_fusion),
//! [`StreamFft::fusion`] and [`Exec::to_dot`](crate::Exec::to_dot) show it; [`FUSION_ENV`]
//! forces one form for every `Auto` plan (tests, benchmarks). Custom load callbacks have both
//! forms too: unfused, the conversion kernel is the callback's own source plus a generated
//! kernel calling its function for every element, with `callerInfo` the node's parameter
//! buffer (written by the parameter-setting node, which runs first). Parameter updates work
//! the same in both forms: unfused, built-in load parameters become the conversion kernel
//! node's argument, and custom ones stay in the parameter buffer.

mod fusion;
pub(crate) mod handle;
mod params;
mod stream;

use std::sync::Arc;

use crate::device::DeviceKey;
use crate::error::{DagError, Error, Result};
use crate::memory::{DeviceRepr, MemorySpace, Region};

pub(crate) use fusion::{convert_config, planned_in_form, recording_decision, Unfused};
pub use fusion::{
    decide_fusion, forget_fusion_decisions, fusion_measurements, measure_fusion, FftForm, Fusion,
    FusionDecision, FusionSource, FusionTimings, FUSION_ENV,
};
pub use handle::{plans_made, WorkShare};
pub(crate) use params::*;
pub use params::{CallbackParams, FftParams, MAX_CB_PARAMS};
pub use stream::StreamFft;

/// The transform type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FftType {
    /// Complex to complex, single precision.
    C2C,
    /// Real to complex, single precision (forward only).
    R2C,
    /// Complex to real, single precision (inverse only).
    C2R,
    /// Complex to complex, double precision.
    Z2Z,
    /// Real to complex, double precision.
    D2Z,
    /// Complex to real, double precision.
    Z2D,
}

impl FftType {
    fn double(self) -> bool {
        matches!(self, FftType::Z2Z | FftType::D2Z | FftType::Z2D)
    }
    /// Bytes of one input element (without a load callback).
    pub fn input_elem_bytes(self) -> usize {
        match self {
            FftType::C2C | FftType::C2R => 8,
            FftType::R2C => 4,
            FftType::Z2Z | FftType::Z2D => 16,
            FftType::D2Z => 8,
        }
    }
    /// Bytes of one output element (without a store callback).
    pub fn output_elem_bytes(self) -> usize {
        match self {
            FftType::C2C | FftType::R2C => 8,
            FftType::C2R => 4,
            FftType::Z2Z | FftType::D2Z => 16,
            FftType::Z2D => 8,
        }
    }
    fn real_input(self) -> bool {
        matches!(self, FftType::R2C | FftType::D2Z)
    }
    fn real_output(self) -> bool {
        matches!(self, FftType::C2R | FftType::Z2D)
    }
    pub(crate) fn raw(self) -> crate::sys::cufftType {
        use crate::sys::cufftType as T;
        match self {
            FftType::C2C => T::CUFFT_C2C,
            FftType::R2C => T::CUFFT_R2C,
            FftType::C2R => T::CUFFT_C2R,
            FftType::Z2Z => T::CUFFT_Z2Z,
            FftType::D2Z => T::CUFFT_D2Z,
            FftType::Z2D => T::CUFFT_Z2D,
        }
    }
}

/// Transform direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// `CUFFT_FORWARD` (-1).
    Forward,
    /// `CUFFT_INVERSE` (+1), unnormalised.
    Inverse,
}

impl Direction {
    pub(crate) fn raw(self) -> i32 {
        match self {
            Direction::Forward => crate::sys::CUFFT_FORWARD,
            Direction::Inverse => crate::sys::CUFFT_INVERSE as i32,
        }
    }
}

/// cuFFT's advanced data layout (`inembed`, `istride`, `idist`, and the same for the output),
/// in elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Storage dimensions of the input (rank entries; the first is not used by cuFFT).
    pub inembed: Vec<i64>,
    /// Distance between two successive input elements.
    pub istride: i64,
    /// Distance between the first elements of two successive input batches.
    pub idist: i64,
    /// Storage dimensions of the output.
    pub onembed: Vec<i64>,
    /// Distance between two successive output elements.
    pub ostride: i64,
    /// Distance between two successive output batches.
    pub odist: i64,
}

/// A user-defined callback: CUDA C++ defining `function` with cuFFT's LTO callback signature
/// (C++ linkage, not `extern "C"`), which reads its parameters (a struct of `params_size`
/// bytes) through `callerInfo`.
///
/// When a node is lowered, its plan is executed once on scratch buffers before the transform
/// is captured, with the parameter struct still zeroed: the callback must tolerate all-zero
/// parameters (e.g. treat a null pointer as "use `dataIn`/`dataOut`", as the built-ins do).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CustomCallback {
    /// The source.
    pub source: String,
    /// The callback function's name.
    pub function: String,
    /// Size of the parameter struct, bytes (at most 112).
    pub params_size: usize,
    /// Bytes of one element the callback reads (load) or writes (store), for buffer checks.
    pub elem_bytes: usize,
}

/// Load callbacks: how input elements are read.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LoadCallback {
    /// Complex 8-bit integers (`char2`), times the node's scale, into complex float (C2C/C2R).
    ComplexI8,
    /// Complex 16-bit integers (`short2`), times the scale (C2C/C2R).
    ComplexI16,
    /// Real 8-bit integers, times the scale, into real float (R2C).
    RealI8,
    /// Complex float times the scale (C2C/C2R).
    ComplexF32,
    /// User-defined.
    Custom(CustomCallback),
}

/// Store callbacks: how output elements are written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StoreCallback {
    /// The element times the node's scale (e.g. 1/N), optionally added to what is there.
    Scale,
    /// Detected power |X|² times the scale, as `f32`, optionally accumulated (C2C/R2C).
    Power,
    /// User-defined.
    Custom(CustomCallback),
}

impl LoadCallback {
    fn elem_bytes(&self) -> usize {
        match self {
            LoadCallback::ComplexI8 => 2,
            LoadCallback::ComplexI16 => 4,
            LoadCallback::RealI8 => 1,
            LoadCallback::ComplexF32 => 8,
            LoadCallback::Custom(c) => c.elem_bytes,
        }
    }
}

/// What an FFT plan computes: everything but the data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FftPlanDesc {
    /// Transform sizes, 1 to 3 dimensions, slowest first.
    pub sizes: Vec<i64>,
    /// Number of transforms.
    pub batch: i64,
    /// Type and precision.
    pub kind: FftType,
    /// Advanced layout; `None` means contiguous batches.
    pub layout: Option<Layout>,
    /// Load callback.
    pub load: Option<LoadCallback>,
    /// Store callback.
    pub store: Option<StoreCallback>,
    /// Whether the load callback runs inside the transform or as a conversion kernel
    /// before it ([`Fusion`]; default [`Fusion::Auto`]).
    pub fusion: Fusion,
}

impl FftPlanDesc {
    /// A contiguous, callback-free plan.
    pub fn new(kind: FftType, sizes: &[i64], batch: i64) -> Self {
        FftPlanDesc {
            sizes: sizes.to_vec(),
            batch,
            kind,
            layout: None,
            load: None,
            store: None,
            fusion: Fusion::Auto,
        }
    }
    /// With a load callback.
    pub fn with_load(mut self, cb: LoadCallback) -> Self {
        self.load = Some(cb);
        self
    }
    /// With a store callback.
    pub fn with_store(mut self, cb: StoreCallback) -> Self {
        self.store = Some(cb);
        self
    }
    /// With an advanced layout.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = Some(layout);
        self
    }
    /// With a fused, unfused or automatically chosen load ([`Fusion`]).
    pub fn with_fusion(mut self, fusion: Fusion) -> Self {
        self.fusion = fusion;
        self
    }
}

pub(crate) struct PlanInner {
    pub(crate) desc: FftPlanDesc,
    /// Elements the input and output of one node span.
    pub(crate) in_elems: u64,
    pub(crate) out_elems: u64,
}

/// A validated, reusable FFT plan description. Cheap to clone; use it for any number of nodes.
#[derive(Clone)]
pub struct FftPlan {
    pub(crate) inner: Arc<PlanInner>,
}

impl std::fmt::Debug for FftPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.desc.fmt(f)
    }
}

fn plan_err(problem: String) -> Error {
    Error::FftPlan { problem }
}

/// Elements spanned by `batch` transforms with logical sizes `n` in storage `embed` with
/// `stride` and `dist`.
/// `None` when the span does not fit in an `i64`.
fn span(n: &[i64], embed: &[i64], stride: i64, dist: i64, batch: i64) -> Option<u64> {
    let mut lin = 0i64;
    for (i, &ni) in n.iter().enumerate() {
        let inner = embed[i + 1..]
            .iter()
            .try_fold(1i64, |acc, &e| acc.checked_mul(e))?;
        lin = lin.checked_add((ni - 1).checked_mul(inner)?)?;
    }
    let total = (batch - 1)
        .checked_mul(dist)?
        .checked_add(stride.checked_mul(lin)?)?
        .checked_add(1)?;
    u64::try_from(total).ok()
}

/// `batch` times the product of `n`, `None` on overflow.
fn elems(n: &[i64], batch: i64) -> Option<u64> {
    let p = n.iter().try_fold(batch, |acc, &x| acc.checked_mul(x))?;
    u64::try_from(p).ok()
}

impl FftPlan {
    /// Validates `desc`: rank 1–3, positive sizes and batch, a layout that fits the sizes,
    /// callbacks that fit the type and precision.
    pub fn new(desc: FftPlanDesc) -> Result<FftPlan> {
        let rank = desc.sizes.len();
        if !(1..=3).contains(&rank) {
            return Err(plan_err(format!(
                "rank {rank}: 1, 2 or 3 dimensions are supported"
            )));
        }
        if let Some(&bad) = desc.sizes.iter().find(|&&n| n < 1) {
            return Err(plan_err(format!(
                "size {bad} in {:?} is not positive",
                desc.sizes
            )));
        }
        if desc.batch < 1 {
            return Err(plan_err(format!("batch {} is not positive", desc.batch)));
        }
        let kind = desc.kind;
        // Logical sizes of the input and output arrays.
        let mut n_in = desc.sizes.clone();
        let mut n_out = desc.sizes.clone();
        let half = desc.sizes[rank - 1] / 2 + 1;
        if kind.real_input() {
            n_out[rank - 1] = half;
        }
        if kind.real_output() {
            n_in[rank - 1] = half;
        }
        let overflow = || {
            plan_err(format!(
                "sizes {:?} with batch {} (and this layout) span more elements than fit in 64 bits",
                desc.sizes, desc.batch
            ))
        };
        let (in_elems, out_elems) = match &desc.layout {
            None => (
                elems(&n_in, desc.batch).ok_or_else(overflow)?,
                elems(&n_out, desc.batch).ok_or_else(overflow)?,
            ),
            Some(l) => {
                if l.inembed.len() != rank || l.onembed.len() != rank {
                    return Err(plan_err(format!(
                        "inembed and onembed need {rank} entries (have {} and {})",
                        l.inembed.len(),
                        l.onembed.len()
                    )));
                }
                for (what, embed, n) in [
                    ("inembed", &l.inembed, &n_in),
                    ("onembed", &l.onembed, &n_out),
                ] {
                    for i in 1..rank {
                        if embed[i] < n[i] {
                            return Err(plan_err(format!(
                                "{what}[{i}] = {} is smaller than the data's {}",
                                embed[i], n[i]
                            )));
                        }
                    }
                }
                if l.istride < 1 || l.ostride < 1 || l.idist < 1 || l.odist < 1 {
                    return Err(plan_err("strides and distances must be positive".into()));
                }
                (
                    span(&n_in, &l.inembed, l.istride, l.idist, desc.batch).ok_or_else(overflow)?,
                    span(&n_out, &l.onembed, l.ostride, l.odist, desc.batch)
                        .ok_or_else(overflow)?,
                )
            }
        };
        let builtin = |cb_is_builtin: bool, what: &str| -> Result<()> {
            if cb_is_builtin && kind.double() {
                return Err(plan_err(format!(
                    "the built-in {what} callbacks are single precision; {kind:?} needs a custom one"
                )));
            }
            Ok(())
        };
        if let Some(l) = &desc.load {
            builtin(!matches!(l, LoadCallback::Custom(_)), "load")?;
            let ok = match l {
                LoadCallback::RealI8 => kind.real_input(),
                LoadCallback::ComplexI8 | LoadCallback::ComplexI16 | LoadCallback::ComplexF32 => {
                    !kind.real_input()
                }
                LoadCallback::Custom(c) => c.params_size <= MAX_CB_PARAMS,
            };
            if !ok {
                return Err(plan_err(format!(
                    "load callback {l:?} does not fit a {kind:?} plan"
                )));
            }
        }
        if let Some(s) = &desc.store {
            builtin(!matches!(s, StoreCallback::Custom(_)), "store")?;
            let ok = match s {
                StoreCallback::Power => !kind.real_output(),
                StoreCallback::Scale => true,
                StoreCallback::Custom(c) => c.params_size <= MAX_CB_PARAMS,
            };
            if !ok {
                return Err(plan_err(format!(
                    "store callback {s:?} does not fit a {kind:?} plan"
                )));
            }
        }
        if desc.fusion == Fusion::Unfused && !has_unfused_form(&desc) {
            return Err(plan_err(
                "Fusion::Unfused needs a load callback; this plan has none".to_string(),
            ));
        }
        // Element sizes are at most 16 bytes (and custom callbacks' are checked by
        // `input_bytes`): the byte counts must fit too.
        let fits = |e: u64| {
            e.checked_mul(16)
                .is_some_and(|b| usize::try_from(b).is_ok() && i64::try_from(b).is_ok())
        };
        if !fits(in_elems) || !fits(out_elems) {
            return Err(overflow());
        }
        Ok(FftPlan {
            inner: Arc::new(PlanInner {
                desc,
                in_elems,
                out_elems,
            }),
        })
    }

    /// The description.
    pub fn desc(&self) -> &FftPlanDesc {
        &self.inner.desc
    }

    /// Bytes a node's input must hold.
    pub fn input_bytes(&self) -> usize {
        (self.inner.in_elems as usize).saturating_mul(self.input_elem_bytes())
    }

    /// Bytes a node's output must hold.
    pub fn output_bytes(&self) -> usize {
        (self.inner.out_elems as usize).saturating_mul(self.output_elem_bytes())
    }

    /// Size of the load part of the parameter buffer, padded to 16 bytes (0 without one).
    fn load_size(&self) -> usize {
        match &self.inner.desc.load {
            None => 0,
            Some(LoadCallback::Custom(c)) => c.params_size.div_ceil(16) * 16,
            Some(_) => BUILTIN_PARAMS,
        }
    }
    fn store_size(&self) -> usize {
        match &self.inner.desc.store {
            None => 0,
            Some(StoreCallback::Custom(c)) => c.params_size.div_ceil(16) * 16,
            Some(_) => BUILTIN_PARAMS,
        }
    }

    /// Bytes of a node's parameter buffer (load part, then store part); 0 without callbacks.
    pub(crate) fn param_buffer_bytes(&self) -> usize {
        self.load_size() + self.store_size()
    }

    /// Offset of the store part in the parameter buffer.
    pub(crate) fn store_offset(&self) -> usize {
        self.load_size()
    }

    /// A node's parameter-buffer contents for `params` (already checked), fused form: the
    /// load part, then the store part.
    pub(crate) fn param_blob(&self, params: &FftParams) -> [u8; PARAM_BLOB] {
        blob(
            params.load.as_ref(),
            params.store.as_ref().map(|p| (self.store_offset(), p)),
        )
    }

    /// Whether the plan's load callback is a custom one: its unfused form's conversion
    /// kernel then reads the load parameters from the node's parameter buffer (`callerInfo`,
    /// as the fused callback does), so the buffer keeps the fused layout in both forms.
    pub(crate) fn custom_load(&self) -> bool {
        matches!(self.inner.desc.load, Some(LoadCallback::Custom(_)))
    }

    /// Whether a node in `form` keeps the load parameters in its parameter buffer: fused, or
    /// unfused with a custom load callback.
    fn load_in_buffer(&self, form: FftForm) -> bool {
        form == FftForm::Fused || self.custom_load()
    }

    /// What the parameter-setting kernel of a node in `form` writes for `params`: the whole
    /// blob when the buffer holds the load parameters ([`FftPlan::setter_bytes`]); else
    /// (unfused, built-in load) the store part only (the load parameters are then the
    /// conversion kernel's argument, [`FftPlan::load_param_bytes`]).
    pub(crate) fn setter_blob(&self, form: FftForm, params: &FftParams) -> [u8; PARAM_BLOB] {
        if self.load_in_buffer(form) {
            self.param_blob(params)
        } else {
            blob(None, params.store.as_ref().map(|p| (0, p)))
        }
    }

    /// Bytes of a node's parameter buffer in `form` (0: no buffer, no setter node): load part
    /// then store part when fused or with a custom load callback (whose conversion kernel
    /// reads its part), the store part only when unfused with a built-in one.
    pub(crate) fn setter_bytes(&self, form: FftForm) -> usize {
        if self.load_in_buffer(form) {
            self.param_buffer_bytes()
        } else {
            self.store_size()
        }
    }

    /// Offset of the store part in a node's parameter buffer in `form`.
    pub(crate) fn setter_store_offset(&self, form: FftForm) -> usize {
        if self.load_in_buffer(form) {
            self.store_offset()
        } else {
            0
        }
    }

    /// A node's parameter buffer in `form`: its bytes ([`FftPlan::setter_bytes`]) and the
    /// offset of its store part ([`FftPlan::setter_store_offset`]).
    pub(crate) fn buffer_layout(&self, form: FftForm) -> (usize, usize) {
        (self.setter_bytes(form), self.setter_store_offset(form))
    }

    /// The built-in load callback's 16-byte parameter struct for `params` (scale, flags,
    /// override address), as the unfused form's conversion kernel takes it by value.
    pub(crate) fn load_param_bytes(params: &FftParams) -> [u8; BUILTIN_PARAMS] {
        match &params.load {
            Some(CallbackParams::Load { scale, input }) => {
                builtin_bytes(*scale, 0, input.as_ref().map_or(0, |r| r.raw_addr()))
            }
            _ => [0; BUILTIN_PARAMS],
        }
    }

    /// The fusion the description asks for.
    pub fn fusion(&self) -> Fusion {
        self.inner.desc.fusion
    }

    /// Whether the plan has an unfused form: a load callback (built-in or custom), which can
    /// run as a conversion kernel before a plan without it.
    pub fn has_unfused_form(&self) -> bool {
        has_unfused_form(&self.inner.desc)
    }

    /// The plan the unfused form executes after its conversion kernel: the same shape,
    /// layout and store callback, without the load callback (its input is complex or real
    /// float). `None` without an unfused form.
    pub(crate) fn unfused_plan(&self) -> Option<FftPlan> {
        if !self.has_unfused_form() {
            return None;
        }
        let mut desc = self.inner.desc.clone();
        desc.load = None;
        desc.fusion = Fusion::Fused;
        Some(FftPlan::new(desc).expect("removing a load callback keeps a valid plan valid"))
    }

    /// ", load X, store Y" for messages (empty without callbacks).
    fn callback_summary(&self) -> String {
        let d = &self.inner.desc;
        let mut s = String::new();
        if let Some(l) = &d.load {
            s.push_str(&format!(", load {}", cb_name_load(l)));
        }
        if let Some(st) = &d.store {
            s.push_str(&format!(", store {}", cb_name_store(st)));
        }
        s
    }

    fn input_elem_bytes(&self) -> usize {
        self.inner
            .desc
            .load
            .as_ref()
            .map_or(self.inner.desc.kind.input_elem_bytes(), |l| l.elem_bytes())
    }

    fn output_elem_bytes(&self) -> usize {
        match &self.inner.desc.store {
            Some(StoreCallback::Power) => 4,
            Some(StoreCallback::Custom(c)) => c.elem_bytes,
            _ => self.inner.desc.kind.output_elem_bytes(),
        }
    }
}

/// Whether libnvJitLink (needed by LTO callbacks) can be loaded.
pub fn nvjitlink_available() -> Result<()> {
    crate::load::nvjitlink()
}

#[cfg(test)]
mod nvrtc_tests;
#[cfg(test)]
mod tests;
