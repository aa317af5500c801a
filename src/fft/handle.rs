//! cuFFT handles: creation with LTO callbacks attached (compiled once per source and
//! architecture), plan making, the parameter-setting kernel and zeroed device buffers, shared by
//! FFT nodes (`dag::nodes::fft`) and [`StreamFft`](super::StreamFft).

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use super::{FftPlan, LoadCallback, StoreCallback};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{compile, CodeKind, CompileOptions, Kernel, Module};
use crate::memory::{Allocation, MemorySpace};
use crate::result::{cufft as cf, runtime as rt};
use crate::sys;

/// Which work area an FFT node uses: nodes with the same slot are ordered by the DAG, so they
/// can share one; `plans` are all the plans using the slot (the area fits the largest).
#[derive(Clone, Debug)]
pub struct WorkShare {
    /// The slot.
    pub slot: usize,
    /// Every plan of the nodes sharing the slot.
    pub plans: Vec<FftPlan>,
}

/// Creates a cuFFT handle for `plan` with its callbacks attached (not yet made). The callbacks'
/// `caller_info` is the parameter buffer at `params` (load part) and `params + store_offset`.
pub(crate) fn new_handle(
    device: &Device,
    plan: &FftPlan,
    params: Option<u64>,
    store_offset: usize,
) -> Result<Handle> {
    let d = &plan.inner.desc;
    // SAFETY: the handle is owned by `Handle` and destroyed in its Drop.
    let mut handle = Handle {
        raw: unsafe { cf::create()? },
        device: device.clone(),
        caller_info: Box::new([std::ptr::null_mut(); 2]),
        callbacks: Vec::new(),
    };
    if d.load.is_none() && d.store.is_none() {
        return Ok(handle);
    }
    crate::load::nvjitlink()?;
    let (ld_type, st_type) = callback_types(d.kind);
    let base = params.expect("callbacks have parameters");
    let cbs = [
        d.load.as_ref().map(|cb| (load_cb(cb), ld_type, base)),
        d.store
            .as_ref()
            .map(|cb| (store_cb(cb, d.kind), st_type, base + store_offset as u64)),
    ];
    for (slot, cb) in cbs.into_iter().enumerate() {
        let Some(((sym, src), kind, info)) = cb else {
            continue;
        };
        let ir = callback_lto(device, &sym, &src)?;
        let sym = CString::new(sym).map_err(|_| Error::Nul {
            what: "the callback name",
        })?;
        handle.caller_info[slot] = info as *mut c_void;
        // SAFETY: the handle is not made yet; `ir` defines `sym`; the name, the IR and the
        // caller-info slot (pointing into the parameter buffer) are kept with the handle,
        // since cuFFT reads them again when the plan is made.
        unsafe {
            cf::set_jit_callback(handle.raw, &sym, &ir, kind, &mut handle.caller_info[slot])?
        };
        handle.callbacks.push((sym, ir));
    }
    Ok(handle)
}

/// An owned cuFFT handle.
pub(crate) struct Handle {
    raw: sys::cufftHandle,
    device: Device,
    /// The `caller_info` pointers given to `cufftXtSetJITCallback` (load, store): cuFFT keeps
    /// the address of this array, so it lives as long as the handle.
    caller_info: Box<[*mut c_void; 2]>,
    /// The callback names and LTO-IR given to `cufftXtSetJITCallback`: cuFFT reads them again
    /// when the plan is made, so they live as long as the handle.
    callbacks: Vec<(CString, Arc<Vec<u8>>)>,
}

// SAFETY: a cuFFT handle is not bound to the thread that made it; a `Handle` is used only by
// its owner (through `&mut` or ownership), never from two threads at once. The `caller_info`
// pointers are device addresses cuFFT reads, never dereferenced on the host. Not `Sync`.
unsafe impl Send for Handle {}

impl Handle {
    pub(crate) fn raw(&self) -> sys::cufftHandle {
        self.raw
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: owned handle; the Exec holding it has waited for its launches.
        if let Err(e) = unsafe { cf::destroy(self.raw) } {
            self.device.defer("a cuFFT plan", e);
        }
    }
}

pub(super) const SETTER_SRC: &str = r#"
struct cg_blob { unsigned long long w[32]; };
extern "C" __global__ void cudagraph_fft_set_params(unsigned long long* dst, cg_blob b, int nwords) {
    int i = threadIdx.x;
    if (i < nwords) dst[i] = b.w[i];
}
"#;

/// The parameter-setting kernel, compiled once per device.
pub(crate) fn setter_kernel(device: &Device) -> Result<Kernel> {
    static CACHE: OnceLock<Mutex<HashMap<usize, Kernel>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    let mut map = cache.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(k) = map.get(&device.ordinal()) {
        return Ok(k.clone());
    }
    let opts = CompileOptions {
        name: "cudagraph_fft_set_params.cu".into(),
        ..Default::default()
    };
    let k =
        Module::from_source_with(device, SETTER_SRC, &opts)?.kernel("cudagraph_fft_set_params")?;
    map.insert(device.ordinal(), k.clone());
    Ok(k)
}

/// The parameter-setting kernel with its arguments for a parameter buffer at `buffer` of
/// `bytes` bytes, initially writing `blob`: the packed arguments (checked) and the kernel.
pub(crate) fn setter_launch(
    device: &Device,
    buffer: u64,
    blob: [u8; super::PARAM_BLOB],
    bytes: usize,
) -> Result<(crate::kernel::PackedArgs, Kernel)> {
    let k = setter_kernel(device)?;
    let args = [
        crate::kernel::KernelArg::from(buffer),
        crate::kernel::KernelArg::from(blob),
        crate::kernel::KernelArg::from(bytes.div_ceil(8) as i32),
    ];
    k.check_args(&args)?;
    Ok((crate::kernel::PackedArgs::new(&k, &args), k))
}

const BUILTINS: &str = r#"
struct cg_params { float scale; unsigned flags; unsigned long long ptr; };
"#;

/// A built-in load callback: reads `elem`s (from `ptr` when set, else cuFFT's input),
/// scaled by `scale`, as `float2` (complex) or `float` (real).
fn load_source(name: &str, elem: &str, complex: bool) -> String {
    let (ret, value) = if complex {
        ("float2", "make_float2(v.x * p->scale, v.y * p->scale)")
    } else {
        ("float", "v * p->scale")
    };
    format!(
        r#"
__device__ {ret} {name}(void* dataIn, unsigned long long offset, void* info, void* smem) {{
    const cg_params* p = (const cg_params*)info;
    const {elem}* in = p->ptr ? (const {elem}*)p->ptr : (const {elem}*)dataIn;
    {elem} v = in[offset];
    return {value};
}}"#
    )
}

/// A built-in store callback: writes `value` (of cuFFT's element `e`, scaled) as `out`
/// elements (to `ptr` when set, else cuFFT's output), added to what is there when flag bit 0
/// is set.
fn store_source(name: &str, e: &str, out: &str, value: &str) -> String {
    let accumulate = if out == "float2" {
        "{ float2 o = out[offset]; v.x += o.x; v.y += o.y; }"
    } else {
        "v += out[offset];"
    };
    format!(
        r#"
__device__ void {name}(void* dataOut, unsigned long long offset, {e} e, void* info, void* smem) {{
    const cg_params* p = (const cg_params*)info;
    {out}* out = p->ptr ? ({out}*)p->ptr : ({out}*)dataOut;
    {out} v = {value};
    if (p->flags & 1u) {accumulate}
    out[offset] = v;
}}"#
    )
}

/// The source of built-in callback `name`, from the two templates above.
fn builtin_source(name: &str) -> String {
    match name {
        "cudagraph_load_ci8" => load_source(name, "char2", true),
        "cudagraph_load_ci16" => load_source(name, "short2", true),
        "cudagraph_load_ri8" => load_source(name, "signed char", false),
        "cudagraph_load_cf32" => load_source(name, "float2", true),
        "cudagraph_store_scale_c" => store_source(
            name,
            "float2",
            "float2",
            "make_float2(e.x * p->scale, e.y * p->scale)",
        ),
        "cudagraph_store_scale_r" => store_source(name, "float", "float", "e * p->scale"),
        "cudagraph_store_power" => store_source(
            name,
            "float2",
            "float",
            "(e.x * e.x + e.y * e.y) * p->scale",
        ),
        _ => unreachable!("unknown built-in callback {name}"),
    }
}

/// The name of the unfused form's conversion kernel for a custom load callback.
pub(crate) const CONVERT_CUSTOM: &str = "cudagraph_fft_convert_custom";

/// The unfused form's conversion kernel for load callback `cb` of a `kind` plan: its name and
/// source. The kernel calls the callback's own device function (built-in: from the same
/// template as the LTO callback; custom: the user's source, compiled as ordinary device code
/// with the same options as its LTO compile) for every element `i` of the input span, with
/// `offset = i`, and writes the value to element `i` of the scratch buffer (the type the
/// callback-free plan reads: float or float2, double or double2 for a custom callback of a
/// double-precision plan): that plan then reads at each offset what the fused plan's callback
/// would have returned there (same layout, strides included). A built-in's parameter struct
/// is the kernel's by-value argument (its address is `callerInfo`); a custom callback's
/// `callerInfo` is the kernel's `info` argument, the node's parameter buffer.
pub(crate) fn convert_source(cb: &LoadCallback, kind: super::FftType) -> (&'static str, String) {
    if let LoadCallback::Custom(c) = cb {
        let out = match (kind.double(), kind.real_input()) {
            (false, false) => "float2",
            (false, true) => "float",
            (true, false) => "double2",
            (true, true) => "double",
        };
        let source = format!(
            r#"{}
extern "C" __global__ void {CONVERT_CUSTOM}({out}* out, void* dataIn, void* info, unsigned long long n) {{
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = {}(dataIn, i, info, nullptr);
}}
"#,
            c.source, c.function
        );
        return (CONVERT_CUSTOM, source);
    }
    let (kernel, callback, out) = match cb {
        LoadCallback::ComplexI8 => ("cudagraph_fft_convert_ci8", "cudagraph_load_ci8", "float2"),
        LoadCallback::ComplexI16 => (
            "cudagraph_fft_convert_ci16",
            "cudagraph_load_ci16",
            "float2",
        ),
        LoadCallback::RealI8 => ("cudagraph_fft_convert_ri8", "cudagraph_load_ri8", "float"),
        LoadCallback::ComplexF32 => (
            "cudagraph_fft_convert_cf32",
            "cudagraph_load_cf32",
            "float2",
        ),
        LoadCallback::Custom(_) => unreachable!("handled above"),
    };
    let source = format!(
        r#"{BUILTINS}{}
extern "C" __global__ void {kernel}({out}* out, void* dataIn, cg_params p, unsigned long long n) {{
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = {callback}(dataIn, i, &p, 0);
}}
"#,
        builtin_source(callback)
    );
    (kernel, source)
}

/// Launches `kernel` on `stream` with packed `args` and shape `cfg`.
///
/// # Safety
/// `args` were packed for `kernel` from checked arguments; every device address among them
/// stays valid, with the sizes the kernel uses, until the launch has run; `cfg` is a valid
/// shape for the kernel; `kernel` is a loaded kernel of the stream's device.
pub(crate) unsafe fn launch_packed(
    kernel: &Kernel,
    cfg: crate::kernel::LaunchConfig,
    args: &crate::kernel::PackedArgs,
    stream: sys::cudaStream_t,
) -> Result<()> {
    let func = kernel
        .raw()
        .map(|k| k.as_ptr())
        .ok_or_else(|| Error::Placeholder {
            what: "the FFT parameter kernel".into(),
            problem: "it cannot be launched",
        })?;
    // SAFETY: the caller's contract.
    unsafe {
        rt::launch_kernel(
            func as *const c_void,
            cfg.grid.into(),
            cfg.block.into(),
            args.kernel_params(),
            cfg.shared_mem_bytes as usize,
            stream,
        )
    }
}

/// Compiles a callback to LTO-IR, cached per (source, function, architecture).
fn callback_lto(device: &Device, function: &str, source: &str) -> Result<Arc<Vec<u8>>> {
    type Key = (String, String, (u32, u32));
    static CACHE: OnceLock<Mutex<HashMap<Key, Arc<Vec<u8>>>>> = OnceLock::new();
    let cc = device.limits().compute_capability;
    let key = (source.to_string(), function.to_string(), cc);
    let cache = CACHE.get_or_init(Default::default);
    if let Some(ir) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
        return Ok(ir.clone());
    }
    let opts = CompileOptions {
        name: format!("{function}.cu"),
        kind: CodeKind::LtoIr,
        ..Default::default()
    };
    let ir = Arc::new(compile(Some(device), source, &opts)?.image);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key, ir.clone());
    Ok(ir)
}

/// (symbol, source) of a load callback.
pub(super) fn load_cb(cb: &LoadCallback) -> (String, String) {
    let builtin = |n: &str| (n.to_string(), format!("{BUILTINS}{}", builtin_source(n)));
    match cb {
        LoadCallback::ComplexI8 => builtin("cudagraph_load_ci8"),
        LoadCallback::ComplexI16 => builtin("cudagraph_load_ci16"),
        LoadCallback::RealI8 => builtin("cudagraph_load_ri8"),
        LoadCallback::ComplexF32 => builtin("cudagraph_load_cf32"),
        LoadCallback::Custom(c) => (c.function.clone(), c.source.clone()),
    }
}

/// The cuFFT callback types for a plan's load and store callbacks.
fn callback_types(kind: super::FftType) -> (sys::cufftXtCallbackType, sys::cufftXtCallbackType) {
    use super::FftType as F;
    use sys::cufftXtCallbackType as T;
    match kind {
        F::C2C => (T::CUFFT_CB_LD_COMPLEX, T::CUFFT_CB_ST_COMPLEX),
        F::R2C => (T::CUFFT_CB_LD_REAL, T::CUFFT_CB_ST_COMPLEX),
        F::C2R => (T::CUFFT_CB_LD_COMPLEX, T::CUFFT_CB_ST_REAL),
        F::Z2Z => (T::CUFFT_CB_LD_COMPLEX_DOUBLE, T::CUFFT_CB_ST_COMPLEX_DOUBLE),
        F::D2Z => (T::CUFFT_CB_LD_REAL_DOUBLE, T::CUFFT_CB_ST_COMPLEX_DOUBLE),
        F::Z2D => (T::CUFFT_CB_LD_COMPLEX_DOUBLE, T::CUFFT_CB_ST_REAL_DOUBLE),
    }
}

/// (symbol, source) of a store callback.
pub(super) fn store_cb(cb: &StoreCallback, kind: super::FftType) -> (String, String) {
    let builtin = |n: &str| (n.to_string(), format!("{BUILTINS}{}", builtin_source(n)));
    match cb {
        StoreCallback::Scale if kind == super::FftType::C2R => builtin("cudagraph_store_scale_r"),
        StoreCallback::Scale => builtin("cudagraph_store_scale_c"),
        StoreCallback::Power => builtin("cudagraph_store_power"),
        StoreCallback::Custom(c) => (c.function.clone(), c.source.clone()),
    }
}

static PLANS_MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many cuFFT plans (`cufftMakePlan*`) this process has made, for FFT nodes and
/// [`StreamFft`](super::StreamFft)s: a diagnostic (e.g. to see that a whole-graph update kept
/// the plans of unchanged FFT nodes).
pub fn plans_made() -> u64 {
    PLANS_MADE.load(std::sync::atomic::Ordering::Relaxed)
}

/// The shape cuFFT makes `plan` with.
#[derive(Debug)]
pub(crate) enum Shape {
    /// Every value fits in 32 bits: `cufftMakePlanMany`.
    Narrow(cf::PlanShape<i32>),
    /// `cufftMakePlanMany64`.
    Wide(cf::PlanShape<i64>),
}

/// The shape of `plan` (advanced layout if any): 32-bit when every value fits (LTO callbacks
/// need it; the 64-bit call answers `CUFFT_INVALID_SIZE` for them), else 64-bit, which a plan
/// with callbacks cannot use ([`Error::FftPlan`]).
pub(crate) fn plan_shape(plan: &FftPlan) -> Result<Shape> {
    let d = &plan.inner.desc;
    let shape = match &d.layout {
        None => cf::PlanShape {
            n: d.sizes.clone(),
            inembed: None,
            istride: 1,
            idist: 0,
            onembed: None,
            ostride: 1,
            odist: 0,
            batch: d.batch,
        },
        Some(l) => cf::PlanShape {
            n: d.sizes.clone(),
            inembed: Some(l.inembed.clone()),
            istride: l.istride,
            idist: l.idist,
            onembed: Some(l.onembed.clone()),
            ostride: l.ostride,
            odist: l.odist,
            batch: d.batch,
        },
    };
    if let Some(small) = shape.narrow() {
        return Ok(Shape::Narrow(small));
    }
    if d.load.is_some() || d.store.is_some() {
        return Err(Error::FftPlan {
            problem: format!(
                "cuFFT LTO callbacks need sizes, strides and batch that fit in 32 bits \
                 (plan {:?} {:?} x{}{}{})",
                d.kind,
                d.sizes,
                d.batch,
                if d.layout.is_some() {
                    " with a layout"
                } else {
                    ""
                },
                plan.callback_summary(),
            ),
        });
    }
    Ok(Shape::Wide(shape))
}

/// Makes a cuFFT plan for `plan` on `handle` in its [`plan_shape`]; returns the work size.
pub(crate) fn make_plan(handle: sys::cufftHandle, plan: &FftPlan) -> Result<usize> {
    let shape = plan_shape(plan)?;
    PLANS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let kind = plan.inner.desc.kind.raw();
    // SAFETY: the handle is live and not yet made; the embed arrays have rank entries.
    unsafe {
        match shape {
            Shape::Narrow(mut s) => cf::make_plan_many(handle, &mut s, kind),
            Shape::Wide(mut s) => cf::make_plan_many(handle, &mut s, kind),
        }
    }
}

/// A cuFFT handle for `plan` with its callbacks attached to a new zeroed parameter buffer of
/// `layout.0` bytes (when not 0) whose store part is at `layout.1` (a form's
/// [`FftPlan::buffer_layout`]), automatic work-area allocation off, and the plan made; returns
/// the handle, the buffer and the work-area bytes the plan needs. Shared by FFT nodes,
/// [`StreamFft`](super::StreamFft) and the fusion measurement.
pub(crate) fn planned_handle(
    device: &Device,
    plan: &FftPlan,
    layout: (usize, usize),
) -> Result<(Handle, Option<Arc<Allocation>>, usize)> {
    let (param_bytes, store_offset) = layout;
    let params = if param_bytes > 0 {
        Some(zeroed_device(device, param_bytes)?)
    } else {
        None
    };
    let handle = new_handle(device, plan, params.as_ref().map(|p| p.ptr), store_offset)?;
    // The work area is attached by the caller (shared by nodes the DAG orders, or owned).
    // SAFETY: the handle is live and not made.
    unsafe { cf::set_auto_allocation(handle.raw, false)? };
    let need = make_plan(handle.raw, plan)?;
    Ok((handle, params, need))
}

/// A zeroed device allocation, the zeroing completed on return (so work on any stream sees
/// it).
pub(crate) fn zeroed_device(device: &Device, bytes: usize) -> Result<Arc<Allocation>> {
    let a = Allocation::new(device, bytes.max(16), MemorySpace::Device)?;
    // SAFETY: the allocation is live, `a.bytes` long and not shared yet; the null stream is
    // the legacy default stream, on which `cudaMemset` runs.
    unsafe {
        rt::memset(a.ptr as *mut c_void, 0, a.bytes)?;
        rt::stream_synchronize(std::ptr::null_mut())?;
    }
    Ok(a)
}
