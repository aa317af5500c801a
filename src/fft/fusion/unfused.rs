//! The unfused form: the conversion kernel that applies the load callback to every element,
//! writing a scratch buffer the callback-free plan then reads ([`Unfused`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::FftForm;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::fft::handle::{convert_source, planned_handle, zeroed_device, Handle};
use crate::fft::{FftParams, FftPlan, FftType, LoadCallback};
use crate::kernel::{CompileOptions, Kernel, KernelArg, LaunchConfig, Module, PackedArgs};
use crate::memory::Allocation;

/// The unfused form's extra state: the plan without the load callback, the conversion kernel
/// and the scratch buffer it writes (owned by one node or [`StreamFft`](crate::fft::StreamFft),
/// never shared).
pub(crate) struct Unfused {
    /// The plan executed after the conversion.
    pub(crate) plan: FftPlan,
    /// The conversion kernel (it keeps its module loaded).
    pub(crate) kernel: Kernel,
    /// The converted input: the plan's input span, as float (real) or float2 (complex).
    pub(crate) scratch: Arc<Allocation>,
    /// Elements of the span.
    pub(crate) elems: u64,
    /// Whether the load callback is custom: the kernel then reads its parameters from the
    /// node's parameter buffer (its argument 2 is that buffer's address, which parameter
    /// updates never change), instead of taking them by value.
    pub(crate) custom: bool,
}

/// A plan made in `form`: unfused, its conversion kernel and scratch buffer and the
/// callback-free-load plan's handle; fused, the plan's own handle. Also the parameter buffer
/// (laid out for the form) and the work-area bytes the handle needs. One place for FFT nodes,
/// `StreamFft` and the measurement rigs.
#[allow(clippy::type_complexity)] // reason: the parts a caller keeps, named at each call
pub(crate) fn planned_in_form(
    device: &Device,
    plan: &FftPlan,
    form: FftForm,
) -> Result<(Option<Unfused>, Handle, Option<Arc<Allocation>>, usize)> {
    let unfused = match form {
        FftForm::Fused => None,
        FftForm::Unfused => Some(Unfused::new(device, plan)?),
    };
    let (handle, params, need) = planned_handle(
        device,
        unfused.as_ref().map_or(plan, |u| &u.plan),
        plan.buffer_layout(form),
    )?;
    Ok((unfused, handle, params, need))
}

impl Unfused {
    /// The unfused form of `plan` (which has one) on `device`: its plan description, the
    /// conversion kernel (compiled once per device and load callback) and a zeroed scratch
    /// buffer.
    pub(crate) fn new(device: &Device, plan: &FftPlan) -> Result<Unfused> {
        let inner = plan.unfused_plan().ok_or_else(|| Error::FftPlan {
            problem: "this plan has no unfused form (it needs a load callback)".into(),
        })?;
        let load = plan
            .desc()
            .load
            .as_ref()
            .expect("an unfused form has a load");
        Ok(Unfused {
            kernel: convert_kernel(device, load, plan.desc().kind)?,
            scratch: zeroed_device(device, inner.input_bytes())?,
            elems: plan.inner.in_elems,
            plan: inner,
            custom: plan.custom_load(),
        })
    }

    /// The conversion kernel's launch shape.
    pub(crate) fn config(&self) -> LaunchConfig {
        convert_config(self.elems)
    }

    /// The conversion kernel's argument 2 for `params`: a built-in callback's parameter
    /// struct (by value), or, custom, the address of the node's parameter buffer `buffer`
    /// (0 without one: a custom callback with no parameters and no store callback).
    pub(crate) fn load_arg(&self, buffer: Option<u64>, params: &FftParams) -> KernelArg<'static> {
        if self.custom {
            KernelArg::from(buffer.unwrap_or(0))
        } else {
            KernelArg::from(FftPlan::load_param_bytes(params))
        }
    }

    /// The conversion kernel's arguments: scratch, input address, load argument
    /// ([`Unfused::load_arg`]), count.
    pub(crate) fn args<'a>(&self, input: u64, load: KernelArg<'a>) -> [KernelArg<'a>; 4] {
        [
            KernelArg::from(self.scratch.ptr),
            KernelArg::from(input),
            load,
            KernelArg::from(self.elems),
        ]
    }

    /// The arguments, checked and packed.
    pub(crate) fn packed(&self, input: u64, load: KernelArg<'_>) -> Result<PackedArgs> {
        let args = self.args(input, load);
        self.kernel.check_args(&args)?;
        Ok(PackedArgs::new(&self.kernel, &args))
    }
}

const CONVERT_BLOCK: u32 = 256;
/// Most blocks of a conversion (the kernel loops over what one pass does not cover).
const MAX_CONVERT_BLOCKS: u64 = 1 << 20;

/// The conversion kernel's launch shape for `elems` elements: one element per thread, up to
/// `MAX_CONVERT_BLOCKS` blocks of 256.
pub(crate) fn convert_config(elems: u64) -> LaunchConfig {
    let blocks = elems
        .div_ceil(CONVERT_BLOCK as u64)
        .clamp(1, MAX_CONVERT_BLOCKS) as u32;
    LaunchConfig::new(blocks, CONVERT_BLOCK)
}

/// The conversion kernel for load callback `cb` of a `kind` plan, compiled (through the NVRTC
/// cache) once per device and source (a custom callback's source is part of it).
fn convert_kernel(device: &Device, cb: &LoadCallback, kind: FftType) -> Result<Kernel> {
    type Cache = Mutex<HashMap<(usize, String), Kernel>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let (name, source) = convert_source(cb, kind);
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = map.get(&(device.ordinal(), source.clone())) {
        return Ok(k.clone());
    }
    let opts = CompileOptions {
        name: format!("{name}.cu"),
        ..Default::default()
    };
    let k = Module::from_source_with(device, &source, &opts)?.kernel(name)?;
    map.insert((device.ordinal(), source), k.clone());
    Ok(k)
}
