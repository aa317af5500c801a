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
        let sym =
            CString::new(sym).map_err(|_| Error::Invalid("callback name has a NUL".into()))?;
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

const SETTER_SRC: &str = r#"
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

const BUILTINS: &str = r#"
struct cg_params { float scale; unsigned flags; unsigned long long ptr; };
"#;

fn builtin_source(name: &str) -> &'static str {
    match name {
        "cudagraph_load_ci8" => {
            r#"
__device__ float2 cudagraph_load_ci8(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    const char2* in = p->ptr ? (const char2*)p->ptr : (const char2*)dataIn;
    char2 v = in[offset];
    return make_float2(v.x * p->scale, v.y * p->scale);
}"#
        }
        "cudagraph_load_ci16" => {
            r#"
__device__ float2 cudagraph_load_ci16(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    const short2* in = p->ptr ? (const short2*)p->ptr : (const short2*)dataIn;
    short2 v = in[offset];
    return make_float2(v.x * p->scale, v.y * p->scale);
}"#
        }
        "cudagraph_load_ri8" => {
            r#"
__device__ float cudagraph_load_ri8(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    const signed char* in = p->ptr ? (const signed char*)p->ptr : (const signed char*)dataIn;
    return in[offset] * p->scale;
}"#
        }
        "cudagraph_load_cf32" => {
            r#"
__device__ float2 cudagraph_load_cf32(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    const float2* in = p->ptr ? (const float2*)p->ptr : (const float2*)dataIn;
    float2 v = in[offset];
    return make_float2(v.x * p->scale, v.y * p->scale);
}"#
        }
        "cudagraph_store_scale_c" => {
            r#"
__device__ void cudagraph_store_scale_c(void* dataOut, unsigned long long offset, float2 e, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    float2* out = p->ptr ? (float2*)p->ptr : (float2*)dataOut;
    float2 v = make_float2(e.x * p->scale, e.y * p->scale);
    if (p->flags & 1u) { float2 o = out[offset]; v.x += o.x; v.y += o.y; }
    out[offset] = v;
}"#
        }
        "cudagraph_store_scale_r" => {
            r#"
__device__ void cudagraph_store_scale_r(void* dataOut, unsigned long long offset, float e, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    float* out = p->ptr ? (float*)p->ptr : (float*)dataOut;
    float v = e * p->scale;
    if (p->flags & 1u) v += out[offset];
    out[offset] = v;
}"#
        }
        "cudagraph_store_power" => {
            r#"
__device__ void cudagraph_store_power(void* dataOut, unsigned long long offset, float2 e, void* info, void* smem) {
    const cg_params* p = (const cg_params*)info;
    float* out = p->ptr ? (float*)p->ptr : (float*)dataOut;
    float v = (e.x * e.x + e.y * e.y) * p->scale;
    if (p->flags & 1u) v += out[offset];
    out[offset] = v;
}"#
        }
        _ => unreachable!("unknown built-in callback {name}"),
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
fn load_cb(cb: &LoadCallback) -> (String, String) {
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

fn store_cb(cb: &StoreCallback, kind: super::FftType) -> (String, String) {
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

/// Makes a cuFFT plan for `plan` on `handle` (advanced layout if any); returns the work size.
/// Uses the 32-bit `cufftMakePlanMany` when every value fits (LTO callbacks need it; the 64-bit
/// call answers `CUFFT_INVALID_SIZE` for them), else `cufftMakePlanMany64`.
pub(crate) fn make_plan(handle: sys::cufftHandle, plan: &FftPlan) -> Result<usize> {
    PLANS_MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = &plan.inner.desc;
    let (mut inembed, istride, idist, mut onembed, ostride, odist) = match &d.layout {
        None => (None, 1, 0, None, 1, 0),
        Some(l) => (
            Some(l.inembed.clone()),
            l.istride,
            l.idist,
            Some(l.onembed.clone()),
            l.ostride,
            l.odist,
        ),
    };
    let small = |v: &[i64]| v.iter().all(|&x| i32::try_from(x).is_ok());
    let fits = small(&d.sizes)
        && small(&[istride, idist, ostride, odist, d.batch])
        && inembed.as_deref().is_none_or(small)
        && onembed.as_deref().is_none_or(small);
    if fits {
        let to32 = |v: &[i64]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();
        let mut n = to32(&d.sizes);
        let mut i32in = inembed.as_deref().map(to32);
        let mut i32on = onembed.as_deref().map(to32);
        // SAFETY: the handle is live and not yet made; the embed arrays have rank entries.
        return unsafe {
            cf::make_plan_many(
                handle,
                &mut n,
                i32in.as_deref_mut(),
                istride as i32,
                idist as i32,
                i32on.as_deref_mut(),
                ostride as i32,
                odist as i32,
                d.kind.raw(),
                d.batch as i32,
            )
        };
    }
    if d.load.is_some() || d.store.is_some() {
        return Err(Error::Invalid(
            "cuFFT LTO callbacks need sizes, strides and batch that fit in 32 bits".into(),
        ));
    }
    let mut n = d.sizes.clone();
    // SAFETY: as above, 64-bit variant.
    unsafe {
        cf::make_plan_many64(
            handle,
            &mut n,
            inembed.as_deref_mut(),
            istride,
            idist,
            onembed.as_deref_mut(),
            ostride,
            odist,
            d.kind.raw(),
            d.batch,
        )
    }
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
