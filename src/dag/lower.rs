//! Lowering: a validated [`Dag`] becomes one graph-construction call per node, in canonical
//! topological order, through the sealed [`Backend`] trait and its one `add_node` method. [`CudaBackend`] makes the CUDA runtime calls;
//! [`RecordingBackend`] logs them, so lowering is tested without a GPU.
//!
//! The contract: backends receive only nodes of a validated DAG (bounds, argument layouts,
//! launch shapes and devices checked). A backend may still fail (CUDA can), but it does not
//! re-validate.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use petgraph::visit::NodeIndexable;

use super::nodes::backend::{sealed, Backend, EdgeData, NodeParams};
use super::nodes::{FftNode, KernelNode};
use super::Dag;
use crate::device::{Device, DeviceKey, DeviceLimits};
use crate::error::Result;
use crate::fft::WorkShare;
use crate::kernel::Kernel;
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, HostBuffer, MemorySpace};
use crate::result::runtime as rt;
use crate::sys;

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
        let shares = super::nodes::fft::work_shares(self, &order);
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
            let share = shares.get(id.index()).and_then(Option::as_ref);
            let h = node.op.lower(&node.name, &deps, backend, share)?;
            handles[id.index()] = Some(h);
        }
        Ok(handles)
    }
}

// ---- recording backend ---------------------------------------------------------------------

/// One call a [`RecordingBackend`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedCall {
    /// The CUDA function the CUDA backend would call, e.g. `cudaGraphAddNode`.
    pub function: &'static str,
    /// The node type it adds (`kernel`, `memcpy`, `memset`, `host`, `empty`, `graph`, or
    /// `captured` for work captured from a stream).
    pub kind: &'static str,
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
                "{i} {} {} `{}` deps={:?} {}\n",
                c.function, c.kind, c.name, c.deps, c.params
            ));
        }
        s
    }

    fn record(
        &mut self,
        function: &'static str,
        kind: &'static str,
        name: &str,
        deps: &[usize],
        params: String,
    ) -> usize {
        self.calls.push(RecordedCall {
            function,
            kind,
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

/// The recording's word for a copy direction the crate wrote.
fn copy_kind(k: sys::cudaMemcpyKind) -> String {
    super::nodes::memcpy::CopyKind::from_raw(k)
        .map_or_else(|| format!("{k:?}"), |c| format!("{c:?}"))
}

/// The recording's words for generic parameters: the node type and the member it names.
fn describe_generic(
    raw: &sys::cudaGraphNodeParams,
    kernel: Option<&KernelNode>,
) -> (&'static str, String) {
    use std::fmt::Write;
    use sys::cudaGraphNodeType as T;
    let u = &raw.__bindgen_anon_1;
    match raw.type_ {
        T::cudaGraphNodeTypeKernel => {
            // SAFETY: the node modules set the member `type_` names.
            let p = unsafe { &u.kernel };
            let k = kernel.expect("kernel parameters come with their node");
            let dim = |d: sys::dim3| format!("({},{},{})", d.x, d.y, d.z);
            let mut s = String::with_capacity(96 + 20 * k.arg_count());
            let _ = write!(
                s,
                "kernel={} grid={} block={} smem={} args=[",
                k.kernel.name(),
                dim(p.gridDim),
                dim(p.blockDim),
                p.sharedMemBytes
            );
            for i in 0..k.arg_count() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&hex(k.arg_bytes(i)));
            }
            s.push(']');
            if let Some(prio) = k.priority {
                let _ = write!(s, " priority={prio}");
            }
            ("kernel", s)
        }
        T::cudaGraphNodeTypeMemcpy => {
            // SAFETY: as above.
            let c = unsafe { &u.memcpy.copyParams };
            let s = format!(
                "dst={:#x} dst_pitch={} src={:#x} src_pitch={} width={} height={} depth={} kind={}",
                c.dstPtr.ptr as u64,
                c.dstPtr.pitch,
                c.srcPtr.ptr as u64,
                c.srcPtr.pitch,
                c.extent.width,
                c.extent.height,
                c.extent.depth,
                copy_kind(c.kind)
            );
            ("memcpy", s)
        }
        T::cudaGraphNodeTypeMemset => {
            // SAFETY: as above.
            let m = unsafe { &u.memset };
            let s = format!(
                "dst={:#x} value={:#x} element_size={} width={} height={} pitch={}",
                m.dst as u64, m.value, m.elementSize, m.width, m.height, m.pitch
            );
            ("memset", s)
        }
        T::cudaGraphNodeTypeHost => ("host", String::new()),
        T::cudaGraphNodeTypeEmpty => ("empty", String::new()),
        other => ("other", format!("{other:?}")),
    }
}

impl sealed::Lower for RecordingBackend {
    type Node = usize;
    fn key(&self) -> DeviceKey {
        DeviceKey::Recording(self.id)
    }
    fn limits(&self) -> &DeviceLimits {
        &self.limits
    }
    fn add_node(
        &mut self,
        name: &str,
        deps: &[usize],
        edges: &[EdgeData],
        params: &NodeParams<'_>,
    ) -> Result<usize> {
        let mut edge_words = String::new();
        for e in edges {
            edge_words.push_str(&format!(
                " edge(from_port={} to_port={} type={})",
                e.from_port, e.to_port, e.type_
            ));
        }
        match params {
            NodeParams::Generic { raw, kernel } => {
                let (kind, p) = describe_generic(raw, *kernel);
                Ok(self.record("cudaGraphAddNode", kind, name, deps, p + &edge_words))
            }
            NodeParams::Copy1d {
                dst,
                src,
                bytes,
                kind,
            } => {
                let p = format!(
                    "dst={dst:#x} src={src:#x} bytes={bytes} kind={}",
                    copy_kind(*kind)
                );
                Ok(self.record("cudaGraphAddMemcpyNode1D", "memcpy", name, deps, p))
            }
            NodeParams::Child(child) => {
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
                    .map(|c| format!("{} {} `{}` deps={:?}", c.function, c.kind, c.name, c.deps))
                    .collect();
                let p = format!("child=[{}]", inner.join("; "));
                Ok(self.record("cudaGraphAddNode", "graph", name, deps, p))
            }
            NodeParams::Fft { node: f, work } => self.add_fft(name, deps, f, work),
            NodeParams::Captured(w) => Ok(self.record(
                "cudaStreamBeginCaptureToGraph",
                "captured",
                name,
                deps,
                w.describe(),
            )),
        }
    }
}

impl RecordingBackend {
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
            deps = vec![self.record("cudaGraphAddNode", "kernel", name, &deps, p)];
        }
        Ok(self.record(
            "cudaStreamBeginCaptureToGraph+cufftExec",
            "captured",
            name,
            &deps,
            plan,
        ))
    }
}

// ---- CUDA backend --------------------------------------------------------------------------

/// A backend that builds a real `cudaGraph_t` with the CUDA runtime.
pub struct CudaBackend {
    graph: sys::cudaGraph_t,
    device: Device,
    pub(crate) fft: super::nodes::fft::LoweringContext,
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
            fft: super::nodes::fft::LoweringContext::default(),
        })
    }

    /// The graph being built. It stays owned by the backend.
    pub fn raw_graph(&self) -> sys::cudaGraph_t {
        self.graph
    }

    /// Gives up ownership of the graph (the caller destroys it) and of the FFT state.
    pub(crate) fn into_graph(mut self) -> (sys::cudaGraph_t, super::nodes::fft::LoweringContext) {
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

impl sealed::Lower for CudaBackend {
    type Node = sys::cudaGraphNode_t;
    fn key(&self) -> DeviceKey {
        self.device.key()
    }
    fn limits(&self) -> &DeviceLimits {
        self.device.limits()
    }
    fn add_node(
        &mut self,
        _: &str,
        deps: &[Self::Node],
        edges: &[EdgeData],
        params: &NodeParams<'_>,
    ) -> Result<Self::Node> {
        match params {
            NodeParams::Generic { raw, kernel } => {
                let mut raw = *raw;
                // Validated node: what the parameters point to (kernel and argument values,
                // regions of live allocations of this device, the host closure) is valid.
                // SAFETY: see above; CUDA copies the parameters during the call, and the DAG
                // (and any Exec made from it) keeps the kernel, buffers and closure alive.
                let node = unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? };
                if let Some(prio) = kernel.and_then(|k| k.priority) {
                    // SAFETY: `node` is the kernel node just added.
                    unsafe { rt::graph_kernel_node_set_priority(node, prio)? };
                }
                Ok(node)
            }
            NodeParams::Copy1d {
                dst,
                src,
                bytes,
                kind,
            } => {
                debug_assert!(edges.is_empty(), "the 1D call takes no edge data");
                // SAFETY: validated node: both regions are in bounds of live allocations on
                // this device, which the DAG (and any Exec made from it) keeps alive.
                unsafe {
                    rt::graph_add_memcpy_node_1d(
                        self.graph,
                        deps,
                        *dst as *mut c_void,
                        *src as *const c_void,
                        *bytes,
                        *kind,
                    )
                }
            }
            NodeParams::Child(child) => {
                let mut sub = CudaBackend::new(&self.device)?;
                child.lower_validated(&mut sub)?;
                let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeGraph);
                raw.__bindgen_anon_1.graph = sys::cudaChildGraphNodeParams {
                    graph: sub.graph,
                    // Clone, as `cudaGraphAddChildGraphNode` does: `sub` destroys its graph.
                    ownership:
                        sys::cudaGraphChildGraphNodeOwnership::cudaGraphChildGraphOwnershipClone,
                };
                // SAFETY: both graphs are live; CUDA clones the child.
                let node = unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? };
                // FFT states of the child stay with the parent's lowering context.
                let (g, fft) = sub.into_graph();
                // SAFETY: the clone lives in the parent; the original is ours to destroy.
                unsafe { rt::graph_destroy(g)? };
                self.fft.absorb(fft);
                Ok(node)
            }
            NodeParams::Fft { node, .. } => {
                debug_assert!(edges.is_empty(), "captured work takes plain dependencies");
                let graph = self.graph;
                let device = self.device.clone();
                self.fft.lower(&device, graph, deps, node)
            }
            NodeParams::Captured(w) => {
                let stream = crate::Stream::new(&self.device)?;
                // SAFETY: stream and graph are live; the dependencies are nodes of the graph.
                unsafe {
                    rt::stream_begin_capture_to_graph(
                        stream.raw(),
                        self.graph,
                        deps,
                        sys::cudaStreamCaptureMode::cudaStreamCaptureModeThreadLocal,
                    )?
                };
                // SAFETY: the stream is live, of this device, capturing.
                let r = unsafe { w.enqueue(stream.raw()) };
                // SAFETY: the stream is capturing (or the capture was invalidated).
                let info = unsafe { rt::stream_capture_dependencies(stream.raw()) };
                // SAFETY: always end the capture we began.
                let ended = unsafe { rt::stream_end_capture(stream.raw()) };
                r?;
                let (_, terminals) = info?;
                ended?;
                if terminals.len() == 1 {
                    Ok(terminals[0])
                } else {
                    let mut raw =
                        NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeEmpty);
                    // SAFETY: the terminals are nodes of the graph.
                    unsafe { rt::graph_add_node(self.graph, &terminals, &[], &mut raw) }
                }
            }
        }
    }
    fn prepare_ffts(&mut self, dag: &Dag, shares: &[Option<WorkShare>]) -> Result<()> {
        let device = self.device.clone();
        self.fft.prepare(&device, dag, shares)
    }
}
