//! The CUDA backend: lowering's calls made with the CUDA runtime, into a new `cudaGraph_t`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;

use crate::dag::nodes::backend::{sealed, EdgeData, NodeParams};
use crate::dag::nodes::KernelNode;
use crate::dag::{Dag, NodeName};
use crate::device::{Device, DeviceKey, DeviceLimits};
use crate::error::Result;
use crate::fft::WorkShare;
use crate::result::runtime as rt;
use crate::sys;

/// A lowered CUDA graph: what a [`CudaBackend`] built (`into_graph`), with the CUDA node of
/// each DAG node once lowering returned them.
pub(crate) struct LoweredGraph {
    /// The graph (the caller destroys it).
    pub(crate) graph: sys::cudaGraph_t,
    /// The CUDA node of each DAG node, by node index (filled by the caller from lowering).
    pub(crate) handles: Vec<Option<sys::cudaGraphNode_t>>,
    /// The FFT nodes' cuFFT states and the capture stream the graph's captured nodes used.
    pub(crate) fft_capture: crate::dag::nodes::fft::FftCaptureState,
    /// The nodes each captured node made, by the node it returned.
    pub(crate) captured: HashMap<CudaNodeKey, Vec<sys::cudaGraphNode_t>>,
    /// The nodes disabled in the DAG, with their names: instantiation disables them.
    pub(crate) disabled: Vec<(sys::cudaGraphNode_t, String)>,
    /// The FFT states of an earlier lowering that this one did not reuse.
    pub(crate) leftover: Option<crate::dag::nodes::fft::FftCaptureState>,
    /// The conditional handles created on the graph, `(index, handle)` (the DAG's own).
    pub(crate) conditionals: Vec<(u32, u64)>,
    /// The graph allocations' addresses, `(index, address)`.
    pub(crate) graph_allocs: Vec<(u32, u64)>,
    /// The device-updatable nodes' handles, `(index, handle)`.
    pub(crate) device_nodes: Vec<(u32, u64)>,
}

/// The CUDA devices as validation sees them: every device of the machine, peer access as
/// `cudaDeviceCanAccessPeer` answers (each answer kept).
#[derive(Default)]
pub(crate) struct CudaDevices {
    answers: RefCell<Vec<((i32, i32), bool)>>,
}

impl sealed::Devices for CudaDevices {
    fn has_device(&self, key: DeviceKey) -> bool {
        matches!(key, DeviceKey::Cuda(o) if crate::device::ordinal_exists(o))
    }
    fn can_access_peer(&self, from: DeviceKey, to: DeviceKey) -> Result<bool> {
        let (DeviceKey::Cuda(a), DeviceKey::Cuda(b)) = (from, to) else {
            return Ok(false);
        };
        if let Some(&(_, can)) = self.answers.borrow().iter().find(|(p, _)| *p == (a, b)) {
            return Ok(can);
        }
        let can = crate::device::can_access_peer(a, b)?;
        self.answers.borrow_mut().push(((a, b), can));
        Ok(can)
    }
}

/// A backend that builds a real `cudaGraph_t` with the CUDA runtime.
///
/// Nodes placed on other devices ([`Dag::place`]) are added with their device current
/// (`cudaSetDevice`), after peer access was enabled for every pair of devices the nodes need.
pub struct CudaBackend {
    graph: sys::cudaGraph_t,
    device: Device,
    devices: CudaDevices,
    pub(crate) fft_capture: crate::dag::nodes::fft::FftCaptureState,
    /// The nodes each captured node (FFT or other) made, by the node it returned.
    pub(crate) captured: HashMap<CudaNodeKey, Vec<sys::cudaGraphNode_t>>,
    /// The nodes disabled in the DAG, with their names (see `Lower::disable`).
    disabled: Vec<(sys::cudaGraphNode_t, String)>,
    /// The conditional handles created on the graph, `(index, handle)`.
    conditionals: Vec<(u32, u64)>,
    /// The graph allocations' addresses, `(index, address)`.
    graph_allocs: Vec<(u32, u64)>,
    /// The device-updatable nodes' handles, `(index, handle)`.
    device_nodes: Vec<(u32, u64)>,
    /// Whether the graph is a conditional body, owned by its node (CUDA's): never destroyed
    /// here.
    body: bool,
}

/// A CUDA node handle as a map key.
pub(crate) type CudaNodeKey = usize;

impl CudaBackend {
    /// Creates an empty CUDA graph on `device` to lower into.
    pub fn new(device: &Device) -> Result<Self> {
        device.bind()?;
        // SAFETY: the graph is owned by the backend (destroyed in Drop unless taken).
        let graph = unsafe { rt::graph_create()? };
        let mut backend = Self::for_body(device, graph);
        backend.body = false; // the backend owns this graph
        Ok(backend)
    }

    /// A backend adding nodes to `graph`, a body graph of a conditional node (CUDA owns it:
    /// it is not destroyed with the backend).
    fn for_body(device: &Device, graph: sys::cudaGraph_t) -> Self {
        CudaBackend {
            graph,
            device: device.clone(),
            devices: CudaDevices::default(),
            fft_capture: crate::dag::nodes::fft::FftCaptureState::default(),
            captured: HashMap::new(),
            disabled: Vec::new(),
            conditionals: Vec::new(),
            graph_allocs: Vec::new(),
            device_nodes: Vec::new(),
            body: true,
        }
    }

    /// Notes the nodes a capture made; returns the node later nodes depend on.
    fn keep_captured(&mut self, c: crate::dag::nodes::captured::Captured) -> sys::cudaGraphNode_t {
        self.captured.insert(c.out as CudaNodeKey, c.nodes);
        c.out
    }

    /// Adds kernel node `k` after `deps` (with `edges`, or none), then its launch attributes.
    fn add_kernel(
        &mut self,
        deps: &[sys::cudaGraphNode_t],
        edges: &[EdgeData],
        k: &KernelNode,
    ) -> Result<sys::cudaGraphNode_t> {
        let params = k.cuda_params();
        // Validated node: its kernel is a live kernel of this device, its arguments
        // match the kernel's layout and their buffers are live allocations this device
        // reaches.
        let function = k.kernel().raw().is_some_and(|c| c.is_function());
        let node = if function {
            // A cudarc function, which the runtime refuses: through the driver.
            #[cfg(feature = "cudarc")]
            // SAFETY: as below; `params.func` is the live function the kernel holds.
            unsafe {
                crate::result::cudarc::graph_add_node(self.graph, deps, edges, &params)?
            }
            #[cfg(not(feature = "cudarc"))]
            unreachable!("functions are made only with the cudarc feature")
        } else if edges.is_empty() {
            // SAFETY: see above; CUDA copies the argument values during the call, and
            // the DAG (and any Exec made from it) keeps the kernel and buffers alive.
            unsafe { rt::graph_add_kernel_node(self.graph, deps, &params)? }
        } else {
            let mut raw = KernelNode::generic(params);
            // SAFETY: as above; `edges` has one entry per dependency.
            unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? }
        };
        if let Some(a) = k.attributes() {
            for (id, value) in a.raw() {
                // SAFETY: `node` is the kernel node just added; `raw` writes the member
                // each attribute reads, and the access-policy window's buffer is kept
                // alive by the DAG (and any Exec made from it).
                unsafe { rt::graph_kernel_node_set_attribute(node, id, &value)? };
            }
        }
        Ok(node)
    }

    /// The graph being built. It stays owned by the backend.
    pub fn raw_graph(&self) -> sys::cudaGraph_t {
        self.graph
    }

    /// Gives up ownership of the graph (the caller destroys it) and of the FFT state.
    pub(crate) fn into_graph(mut self) -> LoweredGraph {
        let mut fft_capture = std::mem::take(&mut self.fft_capture);
        LoweredGraph {
            graph: std::mem::replace(&mut self.graph, std::ptr::null_mut()),
            handles: Vec::new(),
            leftover: fft_capture.take_reuse(),
            fft_capture,
            captured: std::mem::take(&mut self.captured),
            disabled: std::mem::take(&mut self.disabled),
            conditionals: std::mem::take(&mut self.conditionals),
            graph_allocs: std::mem::take(&mut self.graph_allocs),
            device_nodes: std::mem::take(&mut self.device_nodes),
        }
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        if self.graph.is_null() || self.body {
            return; // handed over by `into_graph`, or a conditional node's (CUDA's)
        }
        // SAFETY: the graph is owned and not referenced elsewhere.
        if let Err(e) = unsafe { rt::graph_destroy(self.graph) } {
            self.device.defer("a graph", e);
        }
    }
}

impl sealed::Devices for CudaBackend {
    fn has_device(&self, key: DeviceKey) -> bool {
        self.devices.has_device(key)
    }
    fn can_access_peer(&self, from: DeviceKey, to: DeviceKey) -> Result<bool> {
        self.devices.can_access_peer(from, to)
    }
}

/// The ordinal of a CUDA device key (validation accepted only those for a CUDA backend).
fn ordinal(key: DeviceKey) -> i32 {
    match key {
        DeviceKey::Cuda(o) => o,
        DeviceKey::Recording(_) => unreachable!("validated: a CUDA backend's devices are CUDA's"),
    }
}

impl sealed::Lower for CudaBackend {
    type Node = sys::cudaGraphNode_t;
    fn enable_peer_access(&mut self, from: DeviceKey, to: DeviceKey) -> Result<()> {
        crate::device::enable_peer_access(ordinal(from), ordinal(to))
    }
    fn use_device(&mut self, key: DeviceKey) -> Result<()> {
        if key == self.device.key() {
            self.device.bind()
        } else {
            crate::device::bind_ordinal(ordinal(key))
        }
    }
    fn disable(&mut self, name: &NodeName<'_>, node: Self::Node) -> Result<()> {
        // CUDA disables nodes of an executable graph only: `Exec` does it after instantiating.
        self.disabled.push((node, name.to_string()));
        Ok(())
    }
    fn set_kernel_params(
        &mut self,
        _name: &NodeName<'_>,
        node: Self::Node,
        kernel: &KernelNode,
    ) -> Result<()> {
        let params = kernel.cuda_params();
        // SAFETY: `node` is a kernel node this backend added to the graph being built; the
        // node is validated, as for `add_node` (CUDA copies the argument values during the
        // call, and the DAG and any Exec made from it keep the kernel and buffers alive).
        unsafe { rt::graph_kernel_node_set_params(node, &params) }
    }
    fn key(&self) -> DeviceKey {
        self.device.key()
    }
    fn limits(&self) -> &DeviceLimits {
        self.device.limits()
    }
    fn conditional_handle(&mut self, index: u32, default: u32) -> Result<u64> {
        // SAFETY: the graph is live; lowering gives the handle to one conditional node of
        // this graph and to kernels of this graph or of bodies inside it (validated).
        let h = unsafe {
            rt::graph_conditional_handle_create(
                self.graph,
                default,
                sys::cudaGraphCondAssignDefault,
            )?
        };
        self.conditionals.push((index, h));
        Ok(h)
    }
    #[allow(private_interfaces)] // reason: the trait is sealed (see `sealed::Lower::add_node`)
    fn add_node(
        &mut self,
        name: &NodeName<'_>,
        deps: &[Self::Node],
        edges: &[EdgeData],
        params: NodeParams<'_>,
    ) -> Result<Self::Node> {
        match params {
            NodeParams::Generic(mut raw) => {
                // Validated node: what the parameters point to (regions of live allocations of
                // this device, the host closure) is valid.
                // SAFETY: see above; CUDA copies the parameters during the call, and the DAG
                // (and any Exec made from it) keeps the buffers and closure alive.
                unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw) }
            }
            NodeParams::Kernel(k) => self.add_kernel(deps, edges, k),
            NodeParams::DeviceUpdatableKernel {
                node,
                index,
                dev_node,
            } => {
                let n = self.add_kernel(deps, edges, node)?;
                // SAFETY: `n` is the kernel node just added, of a graph not instantiated yet.
                let h = unsafe { rt::graph_kernel_node_make_device_updatable(n)? } as u64;
                dev_node.set(h);
                self.device_nodes.push((index, h));
                Ok(n)
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
                        dst as *mut c_void,
                        src as *const c_void,
                        bytes,
                        kind,
                    )
                }
            }
            NodeParams::Child(child) => {
                let mut sub = CudaBackend::new(&self.device)?;
                // The child's FFT states stay with the parent's lowering context (under the
                // child node's serial), and an update's lowering takes over the unchanged
                // ones of the same child; one capture stream serves the whole graph.
                self.fft_capture.states.lower_child(
                    name.serial(),
                    &mut sub,
                    |b| &mut b.fft_capture.states,
                    |b| child.lower_validated(b).map(drop),
                )?;
                let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeGraph);
                raw.__bindgen_anon_1.graph = sys::cudaChildGraphNodeParams {
                    graph: sub.graph,
                    // Clone, as `cudaGraphAddChildGraphNode` does: `sub` destroys its graph.
                    ownership:
                        sys::cudaGraphChildGraphNodeOwnership::cudaGraphChildGraphOwnershipClone,
                };
                // SAFETY: both graphs are live; CUDA clones the child.
                let node = unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? };
                // The child's captured nodes are not enabled or disabled one by one (nor are
                // any of a child's nodes): only its FFT state is kept.
                debug_assert!(
                    sub.disabled.is_empty(),
                    "validation refuses disabled nodes in a child graph"
                );
                // `sub` destroys the original graph: the clone lives in the parent.
                Ok(node)
            }
            NodeParams::Conditional {
                kind,
                handle,
                bodies,
                scopes,
                ..
            } => {
                let mut raw =
                    NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeConditional);
                raw.__bindgen_anon_1.conditional = sys::cudaConditionalNodeParams {
                    handle,
                    type_: kind,
                    // The builder refused more bodies than a `u32` counts.
                    size: bodies.len() as u32,
                    phGraph_out: std::ptr::null_mut(),
                };
                // SAFETY: the graph is live, `deps` are its nodes; the handle was created on
                // this graph; CUDA fills `phGraph_out` with the body graphs it owns.
                let node = unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? };
                // SAFETY: the node type is conditional, so `conditional` is the member CUDA
                // wrote: `phGraph_out` points at `size` body graphs, valid while the node lives
                // (it lives with this graph, which outlives this call).
                let out = unsafe { raw.__bindgen_anon_1.conditional.phGraph_out };
                for (i, body) in bodies.iter().enumerate() {
                    // SAFETY: `i < size` (see above).
                    let graph = unsafe { *out.add(i) };
                    let mut sub = CudaBackend::for_body(&self.device, graph);
                    body.lower_scoped(&mut sub, scopes)?;
                }
                Ok(node)
            }
            NodeParams::MemAlloc { index, bytes, dptr } => {
                let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeMemAlloc);
                let ordinal = self.device.ordinal() as i32;
                // SAFETY: writing a plain-data member of the zeroed union.
                let alloc = unsafe { &mut raw.__bindgen_anon_1.alloc };
                alloc.poolProps.allocType = sys::cudaMemAllocationType::cudaMemAllocationTypePinned;
                alloc.poolProps.location = sys::cudaMemLocation {
                    type_: sys::cudaMemLocationType::cudaMemLocationTypeDevice,
                    id: ordinal,
                };
                alloc.bytesize = bytes;
                // SAFETY: the graph is live, `deps` are its nodes; no access descriptors (the
                // graph's device only); CUDA writes the address into `dptr`.
                let node = unsafe { rt::graph_add_node(self.graph, deps, edges, &mut raw)? };
                // SAFETY: the node type is MemAlloc, so `alloc` is the member CUDA wrote.
                let addr = unsafe { raw.__bindgen_anon_1.alloc.dptr } as u64;
                dptr.set(addr);
                self.graph_allocs.push((index, addr));
                Ok(node)
            }
            NodeParams::Fft { node } => {
                debug_assert!(edges.is_empty(), "captured work takes plain dependencies");
                let graph = self.graph;
                let device = self.device.clone();
                let captured = self.fft_capture.lower(&device, graph, deps, node)?;
                Ok(self.keep_captured(captured))
            }
            NodeParams::Captured(work) => {
                debug_assert!(edges.is_empty(), "captured work takes plain dependencies");
                self.device.bind()?;
                let stream = self.fft_capture.capture_stream(&self.device)?;
                let enqueue = |s| {
                    // SAFETY: `capture_into` passes its own stream, live and capturing.
                    unsafe { work.enqueue(s) }
                };
                // SAFETY: graph and stream are live and of the bound device; `deps` are nodes
                // of the graph; the work was declared (unsafely, by its maker) to enqueue only
                // stream-ordered work on the stream it is given.
                let captured = unsafe {
                    crate::dag::nodes::captured::capture_into(
                        self.graph,
                        stream.raw(),
                        deps,
                        enqueue,
                    )?
                };
                Ok(self.keep_captured(captured))
            }
        }
    }
    fn prepare_ffts(&mut self, dag: &Dag, shares: &[Option<WorkShare>]) -> Result<()> {
        let device = self.device.clone();
        self.fft_capture.prepare(&device, dag, shares)
    }
}
