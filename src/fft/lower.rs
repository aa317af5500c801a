//! Lowering FFT nodes to CUDA: one cuFFT handle, parameter buffer and parameter-setting kernel
//! node per FFT node, the transform captured into the graph being built.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use petgraph::visit::NodeIndexable;

use super::{FftNode, FftPlan, LoadCallback, StoreCallback, PARAM_BLOB};
use crate::dag::{Dag, KernelNode, Op};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::kernel::{
    compile, CodeKind, CompileOptions, Kernel, KernelArg, LaunchConfig, Module, PackedArgs,
};
use crate::memory::{Allocation, MemorySpace};
use crate::result::{cufft as cf, runtime as rt};
use crate::stream::Stream;
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

/// Assigns work-area slots to the FFT nodes of `dag` (greedily, in topological order): a node
/// joins a slot only if every node already in it is one of its ancestors.
/// The result is indexed by node index; it is empty when the DAG has no FFT node.
pub(crate) fn work_shares(dag: &Dag, order: &[crate::dag::NodeId]) -> Vec<Option<WorkShare>> {
    let ffts: Vec<_> = order
        .iter()
        .filter(|id| matches!(dag.graph[id.idx].op, Op::Fft(_)))
        .copied()
        .collect();
    if ffts.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<Option<WorkShare>> = vec![None; dag.graph.node_bound()];
    let mut slots: Vec<Vec<crate::dag::NodeId>> = Vec::new();
    let mut space = petgraph::algo::DfsSpace::new(&dag.graph);
    let mut slot_of = HashMap::new();
    for &id in &ffts {
        let slot = slots.iter().position(|members| {
            members.iter().all(|&m| {
                petgraph::algo::has_path_connecting(&dag.graph, m.idx, id.idx, Some(&mut space))
            })
        });
        let slot = slot.unwrap_or_else(|| {
            slots.push(Vec::new());
            slots.len() - 1
        });
        slots[slot].push(id);
        slot_of.insert(id, slot);
    }
    for &id in &ffts {
        let slot = slot_of[&id];
        let plans = slots[slot]
            .iter()
            .map(|m| match &dag.graph[m.idx].op {
                Op::Fft(f) => f.plan.clone(),
                _ => unreachable!(),
            })
            .collect();
        out[id.index()] = Some(WorkShare { slot, plans });
    }
    out
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

/// One FFT node's cuFFT state: its handle (plan made, callbacks attached), its parameter
/// buffer and its work size. Kept across whole-graph updates while the plan does not change.
struct FftState {
    uid: u64,
    desc: super::FftPlanDesc,
    handle: Handle,
    params: Option<Arc<Allocation>>,
    /// Work-area bytes the plan needs.
    need: usize,
    /// Whether the plan was executed once outside capture (see [`LoweringContext::lower`]).
    warmed: bool,
    /// Whether it came from the context being reused (so a failed update gives it back).
    reused: bool,
}

impl FftState {
    fn new(device: &Device, f: &FftNode) -> Result<FftState> {
        let param_bytes = f.param_buffer_bytes();
        let params = if param_bytes > 0 {
            Some(zeroed_device(device, param_bytes)?)
        } else {
            None
        };
        let handle = new_handle(
            device,
            &f.plan,
            params.as_ref().map(|p| p.ptr),
            f.store_offset(),
        )?;
        // The work area comes from the lowering context, shared by nodes the DAG orders.
        // SAFETY: the handle is live and not made.
        unsafe { cf::set_auto_allocation(handle.raw, false)? };
        let need = make_plan(handle.raw, &f.plan)?;
        Ok(FftState {
            uid: f.uid,
            desc: f.plan.inner.desc.clone(),
            handle,
            params,
            need,
            warmed: false,
            reused: false,
        })
    }
}

/// A raw graph node handle, used only by the `Exec` owning the graph.
#[derive(Clone, Copy, PartialEq, Eq)]
struct NodeHandle(sys::cudaGraphNode_t);

// SAFETY: a graph node handle names a node of a graph the owning `Exec` keeps alive; it is
// only passed to CUDA calls made through that `Exec`'s `&mut self`. Not `Sync`.
unsafe impl Send for NodeHandle {}

/// One lowered FFT node.
struct Lowered {
    uid: u64,
    /// `None` once a later lowering took it over.
    state: Option<FftState>,
    /// The parameter-setting kernel node (in the graph the Exec was instantiated from) and its
    /// launch, whose argument 1 is the parameter blob.
    setter: Option<(NodeHandle, KernelNode)>,
}

/// FFT state made while lowering one graph; an [`Exec`](crate::Exec) keeps it alive.
///
/// It is `Send` (an `Exec` may move between threads) but not `Sync`.
#[derive(Default)]
pub(crate) struct LoweringContext {
    stream: Option<Stream>,
    nodes: Vec<Lowered>,
    children: Vec<LoweringContext>,
    work: HashMap<usize, Arc<Allocation>>,
    /// States made by [`LoweringContext::prepare`], taken by their node's lowering.
    prepared: Vec<FftState>,
    /// An earlier lowering's context, whose unchanged FFT states this one takes over.
    reuse: Option<Box<LoweringContext>>,
    /// Staging for parameter updates (no allocation per update).
    scratch: crate::kernel::ArgScratch,
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

impl LoweringContext {
    /// Lowers with the unchanged FFT states of `old` (an earlier lowering of the same nodes).
    pub(crate) fn set_reuse(&mut self, old: LoweringContext) {
        self.reuse = Some(Box::new(old));
    }

    /// The reused context, with the states this lowering did not take.
    pub(crate) fn take_reuse(&mut self) -> Option<LoweringContext> {
        self.reuse.take().map(|b| *b)
    }

    /// Gives back to this (older) context the states `newer` took from it.
    pub(crate) fn reclaim(&mut self, newer: &mut LoweringContext) {
        let taken = newer
            .nodes
            .iter_mut()
            .filter_map(|n| n.state.take_if(|s| s.reused))
            .chain(newer.prepared.extract_if(.., |s| s.reused));
        for mut st in taken.collect::<Vec<_>>() {
            st.reused = false;
            if let Some(n) = self.nodes.iter_mut().find(|n| n.uid == st.uid) {
                n.state = Some(st);
            }
        }
    }

    /// Makes (or takes over from the reused context) the cuFFT state of every FFT node of
    /// `dag`, then sizes each shared work area for the plans actually made and attaches it.
    pub(crate) fn prepare(
        &mut self,
        device: &Device,
        dag: &Dag,
        shares: &[Option<WorkShare>],
    ) -> Result<()> {
        let mut slot_need: HashMap<usize, usize> = HashMap::new();
        let mut slots = Vec::new();
        for (i, share) in shares.iter().enumerate() {
            let Some(share) = share else { continue };
            let Op::Fft(f) = &dag.graph[petgraph::graph::NodeIndex::new(i)].op else {
                unreachable!("shares are given to FFT nodes only")
            };
            let reused = self.reuse.as_mut().and_then(|r| {
                r.nodes
                    .iter_mut()
                    .find(|n| n.uid == f.uid)
                    .and_then(|n| n.state.take_if(|s| s.desc == f.plan.inner.desc))
            });
            let state = match reused {
                Some(mut s) => {
                    s.reused = true;
                    s
                }
                None => FftState::new(device, f)?,
            };
            let need = slot_need.entry(share.slot).or_insert(0);
            *need = (*need).max(state.need);
            slots.push(share.slot);
            self.prepared.push(state);
        }
        for (state, slot) in self.prepared.iter().zip(slots) {
            let area = match self.work.get(&slot) {
                Some(a) => a.clone(),
                None => {
                    let a = Allocation::new(device, slot_need[&slot].max(16), MemorySpace::Device)?;
                    self.work.insert(slot, a.clone());
                    a
                }
            };
            // SAFETY: the area is at least as large as every plan of its slot needs, and kept
            // alive by this context (and by an earlier one for launches captured with it).
            unsafe { cf::set_work_area(state.handle.raw, area.ptr as *mut c_void)? };
        }
        Ok(())
    }

    fn stream(&mut self, device: &Device) -> Result<Stream> {
        if self.stream.is_none() {
            self.stream = Some(Stream::new(device)?);
        }
        Ok(self.stream.clone().expect("just set"))
    }

    /// Lowers one FFT node (prepared by [`LoweringContext::prepare`]) into `graph` after
    /// `deps`; returns the node later nodes depend on.
    pub(crate) fn lower(
        &mut self,
        device: &Device,
        graph: sys::cudaGraph_t,
        deps: &[sys::cudaGraphNode_t],
        f: &FftNode,
    ) -> Result<sys::cudaGraphNode_t> {
        device.bind()?;
        let d = &f.plan.inner.desc;
        let stream = self.stream(device)?;
        let at = self
            .prepared
            .iter()
            .position(|s| s.uid == f.uid)
            .expect("every FFT node is prepared before lowering");
        let mut state = self.prepared.swap_remove(at);
        let handle = &state.handle;
        // SAFETY: the handle and the stream are live.
        unsafe { cf::set_stream(handle.raw, stream.raw())? };

        if !state.warmed {
            // Execute once outside capture, on scratch buffers, so nothing lazy happens
            // inside it.
            let scratch_bytes = (f.plan.inner.in_elems.max(f.plan.inner.out_elems) as usize) * 16;
            let s_in = zeroed_device(device, scratch_bytes)?;
            let s_out = zeroed_device(device, scratch_bytes)?;
            // SAFETY: the scratch buffers are large enough for any element type of the plan;
            // the parameter buffer is zeroed (and complete: `zeroed_device` waits).
            unsafe {
                cf::exec(
                    handle.raw,
                    d.kind.raw(),
                    s_in.ptr as *mut c_void,
                    s_out.ptr as *mut c_void,
                    f.direction.raw(),
                )?;
                rt::stream_synchronize(stream.raw())?;
            }
            drop((s_in, s_out));
            state.warmed = true;
        }

        // The parameter-setting kernel node.
        let mut capture_deps: Vec<sys::cudaGraphNode_t> = deps.to_vec();
        let setter = match &state.params {
            Some(p) => {
                let k = setter_kernel(device)?;
                let blob = f.param_blob(&f.params);
                let words = (f.param_buffer_bytes().div_ceil(8)) as i32;
                let args = [
                    KernelArg::from(p.ptr),
                    KernelArg::from(blob),
                    KernelArg::from(words),
                ];
                k.check_args(&args)?;
                let node = KernelNode {
                    args: PackedArgs::new(&k, &args),
                    kernel: k,
                    config: LaunchConfig::new(1, 32),
                    priority: None,
                };
                // SAFETY: validated arguments for a live kernel of this device.
                let h = unsafe {
                    rt::graph_add_kernel_node(
                        graph,
                        deps,
                        &crate::dag::lower::kernel_params(&node),
                    )?
                };
                capture_deps = vec![h];
                Some((NodeHandle(h), node))
            }
            None => None,
        };

        // Capture the transform into the graph.
        // SAFETY: stream and graph are live; the dependencies are nodes of the graph.
        unsafe {
            rt::stream_begin_capture_to_graph(
                stream.raw(),
                graph,
                &capture_deps,
                sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
            )?
        };
        // SAFETY: the node's regions were validated against the plan; the capture records the
        // call instead of running it.
        let exec = unsafe {
            cf::exec(
                handle.raw,
                d.kind.raw(),
                f.input.raw_addr() as *mut c_void,
                f.output.raw_addr() as *mut c_void,
                f.direction.raw(),
            )
        };
        // SAFETY: the stream is capturing (or the capture was invalidated).
        let info = unsafe { rt::stream_capture_dependencies(stream.raw()) };
        // SAFETY: always end the capture we began.
        let ended = unsafe { rt::stream_end_capture(stream.raw()) };
        exec?;
        let (_, terminals) = info?;
        ended?;
        // The capture's dependency set moves past `capture_deps` only if it recorded nodes.
        let mut sorted = terminals.clone();
        sorted.sort();
        let mut before = capture_deps.clone();
        before.sort();
        if terminals.is_empty() || sorted == before {
            return Err(Error::Invalid(format!(
                "capturing the cuFFT call for a {:?} plan added no nodes to the graph",
                d.kind
            )));
        }
        let out = if terminals.len() == 1 {
            terminals[0]
        } else {
            // SAFETY: the terminals are nodes of the graph.
            unsafe { rt::graph_add_empty_node(graph, &terminals)? }
        };
        self.nodes.push(Lowered {
            uid: f.uid,
            state: Some(state),
            setter,
        });
        Ok(out)
    }

    /// Keeps a child graph's FFT state alive with this one (its nodes are not updatable per
    /// node).
    pub(crate) fn absorb(&mut self, child: LoweringContext) {
        if !child.nodes.is_empty() || !child.children.is_empty() {
            self.children.push(child);
        }
    }

    /// After a whole-graph update, per-node updates must still name the nodes of the graph
    /// the Exec was instantiated from: take those handles from `old`.
    pub(crate) fn adopt_node_handles_from(&mut self, old: &LoweringContext) {
        for n in &mut self.nodes {
            let old_node = old.nodes.iter().find(|o| o.uid == n.uid);
            if let (
                Some((h, _)),
                Some(Lowered {
                    setter: Some((oh, _)),
                    ..
                }),
            ) = (&mut n.setter, old_node)
            {
                *h = *oh;
            }
        }
    }

    /// Writes new parameters into FFT node `uid`'s setter kernel node of `exec`.
    pub(crate) fn set_params(
        &mut self,
        exec: sys::cudaGraphExec_t,
        uid: u64,
        blob: &[u8; PARAM_BLOB],
    ) -> Result<()> {
        let Some((h, node)) = self
            .nodes
            .iter_mut()
            .find(|n| n.uid == uid)
            .and_then(|n| n.setter.as_mut())
        else {
            return Err(Error::Invalid(
                "this FFT node has no callback parameters to update".into(),
            ));
        };
        let mut params = crate::dag::lower::kernel_params(node);
        params.kernelParams = node
            .args
            .staged(&mut self.scratch, &|i| (i == 1).then_some(&blob[..]));
        // SAFETY: `h` is the setter kernel node of the graph `exec` was instantiated from; the
        // staged arguments keep the validated layout.
        unsafe { rt::graph_exec_kernel_node_set_params(exec, h.0, &params)? };
        // Accepted: now the node's own copy changes.
        node.args.set_bytes(1, blob);
        Ok(())
    }
}
