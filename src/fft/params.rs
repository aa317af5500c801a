//! A node's callback parameters ([`CallbackParams`], [`FftParams`]), the parameter blob the
//! node's parameter-setting kernel carries, and the checks of a transform's regions and
//! parameters against its plan.

use super::*;

/// Largest parameter struct of one callback, bytes.
pub const MAX_CB_PARAMS: usize = 112;

/// The parameters of one callback of one node.
#[derive(Clone, Debug)]
pub enum CallbackParams {
    /// For the built-in load callbacks: the scale, and optionally an input region to read
    /// instead of the node's input.
    Load {
        /// Multiplies every input value.
        scale: f32,
        /// Read this region instead of the node's input.
        input: Option<Region>,
    },
    /// For the built-in store callbacks.
    Store {
        /// Multiplies every output value (e.g. `1/N`).
        scale: f32,
        /// Write this region instead of the node's output (e.g. one slot of a ring).
        output: Option<Region>,
        /// Add to the output instead of overwriting it.
        accumulate: bool,
    },
    /// For a custom callback: the bytes of its parameter struct.
    Custom(Vec<u8>),
}

impl CallbackParams {
    /// Built-in load parameters with `scale`.
    pub fn load(scale: f32) -> Self {
        CallbackParams::Load { scale, input: None }
    }
    /// Built-in store parameters with `scale`.
    pub fn store(scale: f32) -> Self {
        CallbackParams::Store {
            scale,
            output: None,
            accumulate: false,
        }
    }
    /// A custom callback's parameter struct.
    pub fn custom<T: DeviceRepr>(value: T) -> Self {
        // `Pod`: no padding, every byte initialised.
        CallbackParams::Custom(bytemuck::bytes_of(&value).to_vec())
    }
    fn region(&self) -> Option<&Region> {
        match self {
            CallbackParams::Load { input, .. } => input.as_ref(),
            CallbackParams::Store { output, .. } => output.as_ref(),
            CallbackParams::Custom(_) => None,
        }
    }
}

/// The callback parameters of one FFT node.
#[derive(Clone, Debug, Default)]
pub struct FftParams {
    /// For the load callback (required when the plan has one).
    pub load: Option<CallbackParams>,
    /// For the store callback (required when the plan has one).
    pub store: Option<CallbackParams>,
}

impl FftParams {
    /// No callback parameters (a plan without callbacks).
    pub fn none() -> Self {
        FftParams::default()
    }

    /// Calls `f` for the allocation of every override region.
    pub(crate) fn for_each_allocation(
        &self,
        f: &mut dyn FnMut(&std::sync::Arc<crate::memory::Allocation>),
    ) {
        for p in [&self.load, &self.store].into_iter().flatten() {
            if let Some(r) = p.region() {
                f(&r.alloc);
            }
        }
    }
}

pub(crate) const BUILTIN_PARAMS: usize = 16;

/// A parameter blob with the load part at 0 and the store part at the given offset.
pub(crate) fn blob(
    load: Option<&CallbackParams>,
    store: Option<(usize, &CallbackParams)>,
) -> [u8; PARAM_BLOB] {
    let mut blob = [0u8; PARAM_BLOB];
    let put =
        |blob: &mut [u8; PARAM_BLOB], at: usize, p: &CallbackParams| match p {
            CallbackParams::Load { scale, input } => blob[at..at + 16].copy_from_slice(
                &builtin_bytes(*scale, 0, input.as_ref().map_or(0, |r| r.raw_addr())),
            ),
            CallbackParams::Store {
                scale,
                output,
                accumulate,
            } => blob[at..at + 16].copy_from_slice(&builtin_bytes(
                *scale,
                *accumulate as u32,
                output.as_ref().map_or(0, |r| r.raw_addr()),
            )),
            CallbackParams::Custom(b) => blob[at..at + b.len()].copy_from_slice(b),
        };
    if let Some(p) = load {
        put(&mut blob, 0, p);
    }
    if let Some((at, p)) = store {
        put(&mut blob, at, p);
    }
    blob
}

/// Whether `desc` has a load callback (built-in or custom: each has an unfused form).
pub(crate) fn has_unfused_form(desc: &FftPlanDesc) -> bool {
    desc.load.is_some()
}

/// The 16-byte parameter struct of the built-in callbacks.
pub(crate) fn builtin_bytes(scale: f32, flags: u32, ptr: u64) -> [u8; BUILTIN_PARAMS] {
    let mut b = [0u8; BUILTIN_PARAMS];
    b[..4].copy_from_slice(&scale.to_ne_bytes());
    b[4..8].copy_from_slice(&flags.to_ne_bytes());
    b[8..].copy_from_slice(&ptr.to_ne_bytes());
    b
}

/// What is wrong with `params` for this node's plan, if anything.
pub(crate) fn params_problem(plan: &FftPlan, params: &FftParams) -> Option<String> {
    let d = &plan.inner.desc;
    let check = |what: &str,
                 has_cb: Option<&CustomCallback>,
                 builtin: bool,
                 p: &Option<CallbackParams>,
                 region_bytes: usize|
     -> Option<String> {
        match (builtin || has_cb.is_some(), p) {
            (false, None) => None,
            (false, Some(_)) => Some(format!("has {what} callback parameters but the plan has no {what} callback")),
            (true, None) => Some(format!("the plan's {what} callback needs {what} parameters")),
            (true, Some(p)) => match (has_cb, p) {
                (Some(c), CallbackParams::Custom(b)) if b.len() == c.params_size => None,
                (Some(c), CallbackParams::Custom(b)) => Some(format!(
                    "the custom {what} callback takes {} parameter bytes, not {}",
                    c.params_size,
                    b.len()
                )),
                (Some(_), _) => Some(format!("the custom {what} callback needs CallbackParams::Custom")),
                (None, CallbackParams::Load { .. }) if what == "load" => None,
                (None, CallbackParams::Store { .. }) if what == "store" => None,
                (None, _) => Some(format!("the built-in {what} callback needs CallbackParams::{}", if what == "load" { "Load" } else { "Store" })),
            }
            .or_else(|| {
                let r = p.region()?;
                (r.alloc.space != MemorySpace::Device).then(|| format!("the {what} override region is not device memory"))
                    .or_else(|| (r.offset.saturating_add(r.len) > r.alloc.bytes).then(|| format!("the {what} override region is outside its buffer")))
                    .or_else(|| (r.len < region_bytes).then(|| format!("the {what} override region has {} bytes; the plan needs {region_bytes}", r.len)))
            }),
        }
    };
    let custom_load = match &d.load {
        Some(LoadCallback::Custom(c)) => Some(c),
        _ => None,
    };
    let custom_store = match &d.store {
        Some(StoreCallback::Custom(c)) => Some(c),
        _ => None,
    };
    check(
        "load",
        custom_load,
        d.load.is_some() && custom_load.is_none(),
        &params.load,
        plan.input_bytes(),
    )
    .or_else(|| {
        check(
            "store",
            custom_store,
            d.store.is_some() && custom_store.is_none(),
            &params.store,
            plan.output_bytes(),
        )
    })
}

/// Checks a transform: plan type against direction, buffers against the plan, callback
/// parameters against the plan's callbacks.
pub(crate) fn check_transform(
    name: &str,
    plan: &FftPlan,
    direction: Direction,
    input: &Region,
    output: &Region,
    params: &FftParams,
) -> Result<()> {
    let fail = |problem: String| {
        Err(Error::Dag(DagError::Fft {
            node: name.to_string(),
            problem,
        }))
    };
    let kind = plan.inner.desc.kind;
    match (kind, direction) {
        (FftType::R2C | FftType::D2Z, Direction::Inverse) => {
            return fail(format!("a {kind:?} transform is forward only"))
        }
        (FftType::C2R | FftType::Z2D, Direction::Forward) => {
            return fail(format!("a {kind:?} transform is inverse only"))
        }
        _ => {}
    }
    for (what, r, need, elem) in [
        ("input", input, plan.input_bytes(), plan.input_elem_bytes()),
        (
            "output",
            output,
            plan.output_bytes(),
            plan.output_elem_bytes(),
        ),
    ] {
        if r.alloc.space != MemorySpace::Device {
            return fail(format!("the {what} must be device memory"));
        }
        if r.elem != elem {
            return fail(format!(
                "the {what} has {}-byte elements, but the plan ({kind:?}{}) {} {elem}-byte \
                 elements",
                r.elem,
                plan.callback_summary(),
                if what == "input" { "reads" } else { "writes" }
            ));
        }
        if r.offset.saturating_add(r.len) > r.alloc.bytes {
            return fail(format!("the {what} region is outside its buffer"));
        }
        if r.len < need {
            return fail(format!(
                "the {what} has {} bytes but the plan ({:?} {:?} x{}) needs {need}",
                r.len, kind, plan.inner.desc.sizes, plan.inner.desc.batch
            ));
        }
        if r.raw_addr() % elem.min(16) as u64 != 0 {
            return fail(format!(
                "the {what} is not aligned to its {elem}-byte elements"
            ));
        }
    }
    if let Some(problem) = params_problem(plan, params) {
        return fail(problem);
    }
    Ok(())
}

/// Every region a transform touches: its input, its output and the callbacks' override
/// regions.
pub(crate) fn transform_regions<'a>(
    input: &'a Region,
    output: &'a Region,
    params: &'a FftParams,
) -> impl Iterator<Item = &'a Region> {
    let overrides =
        [params.load.as_ref(), params.store.as_ref()].map(|p| p.and_then(|p| p.region()));
    [Some(input), Some(output)]
        .into_iter()
        .chain(overrides)
        .flatten()
}

/// Checks that every region an FFT node or call uses belongs to `key`.
pub(crate) fn check_owners(
    name: &(impl std::fmt::Display + ?Sized),
    input: &Region,
    output: &Region,
    params: &FftParams,
    key: DeviceKey,
) -> Result<()> {
    for r in transform_regions(input, output, params) {
        let k = r.alloc.owner.key();
        if k != key {
            return Err(Error::WrongDevice {
                node: Some(name.to_string()),
                problem: format!("an FFT buffer belongs to {k}, but the graph is for {key}"),
            });
        }
    }
    Ok(())
}

pub(crate) fn cb_name_load(c: &LoadCallback) -> String {
    match c {
        LoadCallback::Custom(c) => c.function.clone(),
        other => format!("{other:?}"),
    }
}
pub(crate) fn cb_name_store(c: &StoreCallback) -> String {
    match c {
        StoreCallback::Custom(c) => c.function.clone(),
        other => format!("{other:?}"),
    }
}

/// Size of the parameter blob a node's parameter-setting kernel carries.
pub(crate) const PARAM_BLOB: usize = 256;
