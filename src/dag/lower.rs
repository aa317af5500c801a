//! Lowering: a validated [`Dag`] becomes one graph-construction call per node, in topological
//! order, through the [`Backend`] trait. [`CudaBackend`] makes the CUDA runtime calls;
//! [`RecordingBackend`] logs them, so lowering is tested without a GPU.
//!
//! The contract: backends receive only nodes of a validated DAG (bounds, argument layouts,
//! launch shapes and devices checked). A backend may still fail (CUDA can), but it does not
//! re-validate.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use petgraph::visit::NodeIndexable;

use super::{host_trampoline, CopyKind, Dag, HostNode, KernelNode, MemcpyNode, MemsetNode, Op};
use crate::device::{Device, DeviceLimits};
use crate::error::Result;
use crate::fft::{FftNode, WorkShare};
use crate::kernel::Kernel;
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, HostBuffer, MemorySpace};
use crate::result::runtime as rt;
use crate::sys;

/// Which device (or recording backend) an object belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKey {
    /// A CUDA device, by ordinal.
    Cuda(i32),
    /// A recording backend, by its id.
    Recording(u64),
}

impl std::fmt::Display for DeviceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceKey::Cuda(o) => write!(f, "CUDA device {o}"),
            DeviceKey::Recording(id) => write!(f, "recording backend {id}"),
        }
    }
}

/// Where lowering sends its calls: one method per node kind, each given the backend's handles
/// of the node's dependencies.
pub trait Backend {
    /// The backend's handle for a node it created.
    type Node: Copy;
    /// The device objects must belong to.
    fn key(&self) -> DeviceKey;
    /// The limits launch shapes are validated against.
    fn limits(&self) -> &DeviceLimits;
    /// A kernel launch.
    fn add_kernel(&mut self, name: &str, deps: &[Self::Node], k: &KernelNode)
        -> Result<Self::Node>;
    /// A copy.
    fn add_memcpy(&mut self, name: &str, deps: &[Self::Node], m: &MemcpyNode)
        -> Result<Self::Node>;
    /// A fill.
    fn add_memset(&mut self, name: &str, deps: &[Self::Node], m: &MemsetNode)
        -> Result<Self::Node>;
    /// A host closure.
    fn add_host(&mut self, name: &str, deps: &[Self::Node], h: &HostNode) -> Result<Self::Node>;
    /// An empty node.
    fn add_empty(&mut self, name: &str, deps: &[Self::Node]) -> Result<Self::Node>;
    /// A child graph (lowered with a backend of the same kind).
    fn add_child(&mut self, name: &str, deps: &[Self::Node], child: &Dag) -> Result<Self::Node>;
    /// Called once before the nodes of `dag` are added, with the work-area share of each FFT
    /// node (by node index), when the DAG has FFT nodes. The CUDA backend makes the cuFFT
    /// plans here, so that shared work areas are sized for the plans actually made.
    #[doc(hidden)]
    fn prepare_ffts(&mut self, dag: &Dag, shares: &[Option<WorkShare>]) -> Result<()> {
        let _ = (dag, shares);
        Ok(())
    }
    /// An FFT, with the work area it may share. Returns the node later nodes depend on.
    fn add_fft(
        &mut self,
        name: &str,
        deps: &[Self::Node],
        f: &FftNode,
        work: &WorkShare,
    ) -> Result<Self::Node>;
}

impl Dag {
    /// Validates the DAG for `backend`'s device and lowers it, returning the backend's handle
    /// of each node, indexed by [`NodeId::index`](super::NodeId::index) (`None` for holes left
    /// by removed nodes).
    pub fn lower<B: Backend>(&self, backend: &mut B) -> Result<Vec<Option<B::Node>>> {
        self.validate_for(backend.limits(), backend.key())?;
        self.lower_validated(backend)
    }

    /// Lowers without validating: the caller has validated for this backend.
    pub(crate) fn lower_validated<B: Backend>(
        &self,
        backend: &mut B,
    ) -> Result<Vec<Option<B::Node>>> {
        let mut handles: Vec<Option<B::Node>> = vec![None; self.graph.node_bound()];
        let mut deps: Vec<B::Node> = Vec::new();
        let mut dep_idx = Vec::new();
        // Canonical order (nodes and each node's dependencies by serial): CUDA pairs the nodes
        // of two graphs in a whole-graph update by creation order and dependency order, so two
        // DAGs with the same nodes and edges lower to graphs CUDA pairs node by node, whatever
        // order their edges were added in.
        let order = self.topological_order();
        let shares = crate::fft::lower::work_shares(self, &order);
        if !shares.is_empty() {
            backend.prepare_ffts(self, &shares)?;
        }
        for id in order {
            self.sorted_dependencies(id, &mut dep_idx);
            deps.clear();
            deps.extend(
                dep_idx
                    .iter()
                    .map(|p| handles[p.index()].expect("dependencies are lowered first")),
            );
            let node = &self.graph[id.idx];
            let name = node.name.as_str();
            let h = match &node.op {
                Op::Kernel(k) => backend.add_kernel(name, &deps, k)?,
                Op::Memcpy(m) => backend.add_memcpy(name, &deps, m)?,
                Op::Memset(m) => backend.add_memset(name, &deps, m)?,
                Op::Host(h) => backend.add_host(name, &deps, h)?,
                Op::Empty => backend.add_empty(name, &deps)?,
                Op::Child(c) => backend.add_child(name, &deps, &c.dag)?,
                Op::Fft(f) => backend.add_fft(
                    name,
                    &deps,
                    f,
                    shares[id.index()]
                        .as_ref()
                        .expect("every FFT node has a share"),
                )?,
            };
            handles[id.index()] = Some(h);
        }
        Ok(handles)
    }
}

// ---- recording backend ---------------------------------------------------------------------

/// One call a [`RecordingBackend`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The CUDA function the CUDA backend would call, e.g. `cudaGraphAddKernelNode`.
    pub function: &'static str,
    /// The node's name.
    pub name: String,
    /// Indexes (into the recording) of the calls this one depends on.
    pub deps: Vec<usize>,
    /// The parameters, in words (deterministic).
    pub params: String,
}

static NEXT_RECORDING: AtomicU64 = AtomicU64::new(1);

/// A backend that records the calls lowering makes, instead of making them. It also hands out
/// placeholder buffers and kernels (with addresses and parameter layouts but no memory or
/// code), so a DAG can be built, validated and lowered where there is no GPU.
pub struct RecordingBackend {
    id: u64,
    limits: DeviceLimits,
    next_addr: u64,
    next_fft_handle: u64,
    fft_param_buffers: Vec<Arc<Allocation>>,
    /// The calls received, in order.
    pub calls: Vec<RecordedCall>,
}

impl RecordingBackend {
    /// A recording backend validating against `limits`.
    pub fn new(limits: DeviceLimits) -> Self {
        RecordingBackend {
            id: NEXT_RECORDING.fetch_add(1, Ordering::Relaxed),
            limits,
            next_addr: 0x7000_0000_0000,
            next_fft_handle: 0,
            fft_param_buffers: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn placeholder(&mut self, bytes: usize, space: MemorySpace) -> Arc<Allocation> {
        let ptr = self.next_addr;
        // Keep placeholder ranges apart and 256-byte aligned, like cudaMalloc's.
        self.next_addr += (bytes as u64).div_ceil(256).max(1) * 256;
        Arc::new(Allocation::placeholder(ptr, bytes, space, self.id))
    }

    /// A placeholder device buffer of `len` elements (no memory behind it).
    pub fn device_buffer<T: DeviceRepr>(&mut self, len: usize) -> DeviceBuffer<T> {
        let a = self.placeholder(len * std::mem::size_of::<T>(), MemorySpace::Device);
        DeviceBuffer::from_alloc(a, len)
    }

    /// A placeholder pinned host buffer of `len` elements.
    pub fn host_buffer<T: DeviceRepr>(&mut self, len: usize) -> HostBuffer<T> {
        let a = self.placeholder(len * std::mem::size_of::<T>(), MemorySpace::PinnedHost);
        HostBuffer::from_alloc(a, len)
    }

    /// A kernel with parameters of these sizes (laid out with natural alignment) and no code.
    pub fn kernel(&self, name: &str, param_sizes: &[usize]) -> Kernel {
        Kernel::recording(name, param_sizes, self.id)
    }

    /// The calls as text, one per line: `index function name deps params`.
    pub fn transcript(&self) -> String {
        let mut s = String::new();
        for (i, c) in self.calls.iter().enumerate() {
            s.push_str(&format!(
                "{i} {} `{}` deps={:?} {}\n",
                c.function, c.name, c.deps, c.params
            ));
        }
        s
    }

    fn record(
        &mut self,
        function: &'static str,
        name: &str,
        deps: &[usize],
        params: String,
    ) -> usize {
        self.calls.push(RecordedCall {
            function,
            name: name.to_string(),
            deps: deps.to_vec(),
            params,
        });
        self.calls.len() - 1
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

impl Backend for RecordingBackend {
    type Node = usize;
    fn key(&self) -> DeviceKey {
        DeviceKey::Recording(self.id)
    }
    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    fn add_kernel(&mut self, name: &str, deps: &[usize], k: &KernelNode) -> Result<usize> {
        use std::fmt::Write;
        let c = k.config;
        let mut p = String::with_capacity(96 + 20 * k.arg_count());
        let _ = write!(
            p,
            "kernel={} grid={} block={} smem={} args=[",
            k.kernel.name(),
            c.grid,
            c.block,
            c.shared_mem_bytes
        );
        for i in 0..k.arg_count() {
            if i > 0 {
                p.push(',');
            }
            p.push_str(&hex(k.arg_bytes(i)));
        }
        p.push(']');
        if let Some(prio) = k.priority {
            let _ = write!(p, " priority={prio}");
        }
        Ok(self.record("cudaGraphAddKernelNode", name, deps, p))
    }
    fn add_memcpy(&mut self, name: &str, deps: &[usize], m: &MemcpyNode) -> Result<usize> {
        if m.height == 1 {
            let p = format!(
                "dst={:#x} src={:#x} bytes={} kind={:?}",
                m.dst.raw_addr(),
                m.src.raw_addr(),
                m.width,
                m.kind()
            );
            Ok(self.record("cudaGraphAddMemcpyNode1D", name, deps, p))
        } else {
            let p = format!(
                "dst={:#x} dst_pitch={} src={:#x} src_pitch={} width={} height={} kind={:?}",
                m.dst.raw_addr(),
                m.dst_pitch,
                m.src.raw_addr(),
                m.src_pitch,
                m.width,
                m.height,
                m.kind()
            );
            Ok(self.record("cudaGraphAddMemcpyNode", name, deps, p))
        }
    }
    fn add_memset(&mut self, name: &str, deps: &[usize], m: &MemsetNode) -> Result<usize> {
        let p = format!(
            "dst={:#x} value={:#x} element_size={} width={} height={} pitch={}",
            m.dst.raw_addr(),
            m.value.bits(),
            m.value.size(),
            m.width,
            m.height,
            m.pitch
        );
        Ok(self.record("cudaGraphAddMemsetNode", name, deps, p))
    }
    fn add_host(&mut self, name: &str, deps: &[usize], _h: &HostNode) -> Result<usize> {
        Ok(self.record("cudaGraphAddHostNode", name, deps, String::new()))
    }
    fn add_empty(&mut self, name: &str, deps: &[usize]) -> Result<usize> {
        Ok(self.record("cudaGraphAddEmptyNode", name, deps, String::new()))
    }
    fn add_child(&mut self, name: &str, deps: &[usize], child: &Dag) -> Result<usize> {
        let mut sub = RecordingBackend {
            id: self.id,
            limits: self.limits.clone(),
            next_addr: self.next_addr + 0x1000_0000,
            next_fft_handle: self.next_fft_handle + 1000,
            fft_param_buffers: Vec::new(),
            calls: Vec::new(),
        };
        child.lower_validated(&mut sub)?;
        let inner: Vec<String> = sub
            .calls
            .iter()
            .map(|c| format!("{} `{}` deps={:?}", c.function, c.name, c.deps))
            .collect();
        let p = format!("child=[{}]", inner.join("; "));
        Ok(self.record("cudaGraphAddChildGraphNode", name, deps, p))
    }
    fn add_fft(
        &mut self,
        name: &str,
        deps: &[usize],
        f: &FftNode,
        work: &WorkShare,
    ) -> Result<usize> {
        // What the CUDA backend does, per node: its own cuFFT handle and parameter buffer, a
        // kernel node writing the parameters, then the captured transform.
        self.next_fft_handle += 1;
        let handle = self.next_fft_handle;
        let d = f.plan().desc();
        let plan = format!(
            "handle=#{handle} plan={:?}{:?}x{} dir={:?} in={:#x} out={:#x} work_slot={}",
            d.kind,
            d.sizes,
            d.batch,
            f.direction(),
            f.input.raw_addr(),
            f.output.raw_addr(),
            work.slot
        );
        let bytes = f.param_buffer_bytes();
        let mut deps = deps.to_vec();
        if bytes > 0 {
            let buf = self.placeholder(bytes, MemorySpace::Device);
            let blob = f.param_blob(f.params());
            let p = format!(
                "kernel=cudagraph_fft_set_params handle=#{handle} param_buffer={:#x} bytes={bytes} params={}",
                buf.ptr,
                hex(&blob[..bytes])
            );
            self.fft_param_buffers.push(buf);
            deps = vec![self.record("cudaGraphAddKernelNode", name, &deps, p)];
        }
        Ok(self.record("cudaStreamBeginCaptureToGraph+cufftExec", name, &deps, plan))
    }
}

// ---- CUDA backend --------------------------------------------------------------------------

/// A backend that builds a real `cudaGraph_t` with the CUDA runtime.
pub struct CudaBackend {
    graph: sys::cudaGraph_t,
    device: Device,
    pub(crate) fft: crate::fft::LoweringContext,
}

impl CudaBackend {
    /// Creates an empty CUDA graph on `device` to lower into.
    pub fn new(device: &Device) -> Result<Self> {
        device.bind()?;
        // SAFETY: the graph is owned by the backend (destroyed in Drop unless taken).
        let graph = unsafe { rt::graph_create()? };
        Ok(CudaBackend {
            graph,
            device: device.clone(),
            fft: crate::fft::LoweringContext::default(),
        })
    }

    /// The graph being built. It stays owned by the backend.
    pub fn raw_graph(&self) -> sys::cudaGraph_t {
        self.graph
    }

    /// Gives up ownership of the graph (the caller destroys it) and of the FFT state.
    pub(crate) fn into_graph(mut self) -> (sys::cudaGraph_t, crate::fft::LoweringContext) {
        let graph = std::mem::replace(&mut self.graph, std::ptr::null_mut());
        (graph, std::mem::take(&mut self.fft))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if self.graph.is_null() {
            return; // handed over by `into_graph`
        }
        // SAFETY: the graph is owned and not referenced elsewhere.
        if let Err(e) = unsafe { rt::graph_destroy(self.graph) } {
            self.device.defer("a graph", e);
        }
    }
}

pub(crate) fn kernel_params(k: &KernelNode) -> sys::cudaKernelNodeParams {
    sys::cudaKernelNodeParams {
        func: k.kernel.raw().expect("validated: a CUDA kernel") as *mut c_void,
        gridDim: k.config.grid.into(),
        blockDim: k.config.block.into(),
        sharedMemBytes: k.config.shared_mem_bytes,
        kernelParams: k.args.kernel_params(),
        extra: std::ptr::null_mut(),
    }
}

pub(crate) fn memcpy_kind(k: CopyKind) -> sys::cudaMemcpyKind {
    use sys::cudaMemcpyKind as K;
    match k {
        CopyKind::HostToDevice => K::cudaMemcpyHostToDevice,
        CopyKind::DeviceToHost => K::cudaMemcpyDeviceToHost,
        CopyKind::DeviceToDevice => K::cudaMemcpyDeviceToDevice,
        CopyKind::HostToHost => K::cudaMemcpyHostToHost,
    }
}

pub(crate) fn memcpy_3d_params(m: &MemcpyNode) -> sys::cudaMemcpy3DParms {
    let pitched = |addr: u64, pitch: usize| sys::cudaPitchedPtr {
        ptr: addr as *mut c_void,
        pitch,
        xsize: m.width,
        ysize: m.height,
    };
    sys::cudaMemcpy3DParms {
        srcPtr: pitched(m.src.raw_addr(), m.src_pitch),
        dstPtr: pitched(m.dst.raw_addr(), m.dst_pitch),
        extent: sys::cudaExtent {
            width: m.width,
            height: m.height,
            depth: 1,
        },
        kind: memcpy_kind(m.kind()),
        ..Default::default()
    }
}

pub(crate) fn memset_params(m: &MemsetNode) -> sys::cudaMemsetParams {
    sys::cudaMemsetParams {
        dst: m.dst.raw_addr() as *mut c_void,
        pitch: m.pitch,
        value: m.value.bits(),
        elementSize: m.value.size() as u32,
        width: m.width,
        height: m.height,
    }
}

pub(crate) fn host_params(h: &HostNode) -> sys::cudaHostNodeParams {
    sys::cudaHostNodeParams {
        fn_: Some(host_trampoline),
        userData: Arc::as_ptr(&h.f) as *mut c_void,
    }
}

impl Backend for CudaBackend {
    type Node = sys::cudaGraphNode_t;
    fn key(&self) -> DeviceKey {
        DeviceKey::Cuda(self.device.ordinal() as i32)
    }
    fn limits(&self) -> &DeviceLimits {
        self.device.limits()
    }
    fn add_kernel(&mut self, _: &str, deps: &[Self::Node], k: &KernelNode) -> Result<Self::Node> {
        // SAFETY: validated node: the kernel is live on this device and the arguments match
        // its layout; CUDA copies the argument values during the call.
        let node = unsafe { rt::graph_add_kernel_node(self.graph, deps, &kernel_params(k))? };
        if let Some(prio) = k.priority {
            // SAFETY: `node` is the kernel node just added.
            unsafe { rt::graph_kernel_node_set_priority(node, prio)? };
        }
        Ok(node)
    }
    fn add_memcpy(&mut self, _: &str, deps: &[Self::Node], m: &MemcpyNode) -> Result<Self::Node> {
        // SAFETY: validated node: both regions are in bounds of live allocations on this
        // device, which the DAG (and any Exec made from it) keeps alive.
        unsafe {
            if m.height == 1 {
                rt::graph_add_memcpy_node_1d(
                    self.graph,
                    deps,
                    m.dst.raw_addr() as *mut c_void,
                    m.src.raw_addr() as *const c_void,
                    m.width,
                    memcpy_kind(m.kind()),
                )
            } else {
                rt::graph_add_memcpy_node(self.graph, deps, &memcpy_3d_params(m))
            }
        }
    }
    fn add_memset(&mut self, _: &str, deps: &[Self::Node], m: &MemsetNode) -> Result<Self::Node> {
        // SAFETY: validated node: the region is in bounds of a live device allocation.
        unsafe { rt::graph_add_memset_node(self.graph, deps, &memset_params(m)) }
    }
    fn add_host(&mut self, _: &str, deps: &[Self::Node], h: &HostNode) -> Result<Self::Node> {
        // SAFETY: the trampoline never unwinds; the HostFn is kept alive by the DAG and by any
        // Exec made from it.
        unsafe { rt::graph_add_host_node(self.graph, deps, &host_params(h)) }
    }
    fn add_empty(&mut self, _: &str, deps: &[Self::Node]) -> Result<Self::Node> {
        // SAFETY: `deps` are nodes of this graph.
        unsafe { rt::graph_add_empty_node(self.graph, deps) }
    }
    fn add_child(&mut self, _: &str, deps: &[Self::Node], child: &Dag) -> Result<Self::Node> {
        let mut sub = CudaBackend::new(&self.device)?;
        child.lower_validated(&mut sub)?;
        // SAFETY: both graphs are live; CUDA clones the child, which `sub` then destroys.
        let node = unsafe { rt::graph_add_child_graph_node(self.graph, deps, sub.graph)? };
        // FFT states of the child stay with the parent's lowering context.
        let (g, fft) = sub.into_graph();
        // SAFETY: the clone lives in the parent; the original is ours to destroy.
        unsafe { rt::graph_destroy(g)? };
        self.fft.absorb(fft);
        Ok(node)
    }
    fn prepare_ffts(&mut self, dag: &Dag, shares: &[Option<WorkShare>]) -> Result<()> {
        let device = self.device.clone();
        self.fft.prepare(&device, dag, shares)
    }
    fn add_fft(
        &mut self,
        _: &str,
        deps: &[Self::Node],
        f: &FftNode,
        _work: &WorkShare,
    ) -> Result<Self::Node> {
        let graph = self.graph;
        let device = self.device.clone();
        self.fft.lower(&device, graph, deps, f)
    }
}
