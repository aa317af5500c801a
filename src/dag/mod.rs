//! The DAG builder: named nodes, dependencies, validation.
//!
//! A [`Dag`] is a `petgraph` [`StableDiGraph`] of [`Node`]s. Nodes are added with the `add_*`
//! methods, which check everything that does not depend on the target device right away
//! (kernel arguments against the kernel's parameter layout, copy and memset bounds); edges are
//! added with [`Dag::add_dependency`] and its helpers, which reject a self-loop or a cycle at
//! once, naming the nodes of the cycle. [`Dag::validate`] adds the checks that need the device
//! (launch shapes, every buffer and kernel on that device). Lowering ([`Dag::lower`]) and
//! instantiation ([`Dag::instantiate`]) run only on a validated DAG.

mod dot;
mod exec;
pub(crate) mod lower;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};
use petgraph::Direction;

use crate::device::{Device, DeviceLimits};
use crate::error::{Error, Result};
use crate::fft::FftNode;
use crate::kernel::{Kernel, KernelArg, LaunchConfig, PackedArgs};
use crate::memory::{MemorySpace, Owner, Region};

pub use exec::{Exec, InstantiateFlags, UpdateOutcome};
pub use lower::{Backend, CudaBackend, DeviceKey, RecordedCall, RecordingBackend};

/// A node of a [`Dag`]: a small copyable id.
///
/// Ids are never reused: a node's id holds its place in the underlying petgraph graph and a
/// serial number unique within the DAG (and its clones), so the id of a removed node is
/// rejected ([`DagError::UnknownNode`]) even after another node has taken its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub(crate) idx: NodeIndex,
    serial: u64,
}

impl NodeId {
    /// The node's index in the underlying petgraph graph ([`Dag::graph`]). A removed node's
    /// index may be taken by a later node; the id itself stays distinct.
    pub fn index(self) -> usize {
        self.idx.index()
    }

    /// The node's serial number within its DAG: nodes are numbered from 0 in the order they
    /// were added, and the default name of a node is `kind#serial`.
    pub fn serial(self) -> u64 {
        self.serial
    }
}

/// An edge of the DAG: the source must finish before the target starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dependency;

/// What kind of work a node does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// A kernel launch.
    Kernel,
    /// A memory copy.
    Memcpy,
    /// A memory fill.
    Memset,
    /// A Rust closure run on the host in stream order.
    Host,
    /// Nothing: a join or fork point.
    Empty,
    /// A whole [`Dag`] embedded as one node.
    Child,
    /// A cuFFT transform.
    Fft,
}

impl NodeKind {
    /// Lower-case name, used in default node names and DOT.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Kernel => "kernel",
            NodeKind::Memcpy => "memcpy",
            NodeKind::Memset => "memset",
            NodeKind::Host => "host",
            NodeKind::Empty => "empty",
            NodeKind::Child => "child",
            NodeKind::Fft => "fft",
        }
    }
}

/// A kernel launch: kernel, launch shape and packed arguments.
#[derive(Clone)]
pub struct KernelNode {
    pub(crate) kernel: Kernel,
    pub(crate) config: LaunchConfig,
    pub(crate) args: PackedArgs,
    /// Launch priority (`cudaLaunchAttributePriority`), if set with [`Dag::set_priority`].
    pub(crate) priority: Option<i32>,
}

impl KernelNode {
    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }
    /// The launch shape.
    pub fn config(&self) -> LaunchConfig {
        self.config
    }
    /// The bytes of argument `i`.
    pub fn arg_bytes(&self, i: usize) -> &[u8] {
        self.args.param_bytes(i)
    }
    /// Number of arguments.
    pub fn arg_count(&self) -> usize {
        self.args.len()
    }
    /// The launch priority, if one was set.
    pub fn priority(&self) -> Option<i32> {
        self.priority
    }
}

/// Direction of a copy, from the memory spaces of its ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// Pinned host to device.
    HostToDevice,
    /// Device to pinned host.
    DeviceToHost,
    /// Device to device.
    DeviceToDevice,
    /// Pinned host to pinned host.
    HostToHost,
}

impl CopyKind {
    fn of(dst: MemorySpace, src: MemorySpace) -> CopyKind {
        match (src, dst) {
            (MemorySpace::PinnedHost, MemorySpace::Device) => CopyKind::HostToDevice,
            (MemorySpace::Device, MemorySpace::PinnedHost) => CopyKind::DeviceToHost,
            (MemorySpace::Device, MemorySpace::Device) => CopyKind::DeviceToDevice,
            (MemorySpace::PinnedHost, MemorySpace::PinnedHost) => CopyKind::HostToHost,
        }
    }
    fn as_str(self) -> &'static str {
        match self {
            CopyKind::HostToDevice => "H2D",
            CopyKind::DeviceToHost => "D2H",
            CopyKind::DeviceToDevice => "D2D",
            CopyKind::HostToHost => "H2H",
        }
    }
}

/// A memory copy, 1D (`height == 1`) or 2D (pitched). Sizes are in bytes.
#[derive(Clone, Debug)]
pub struct MemcpyNode {
    pub(crate) dst: Region,
    pub(crate) src: Region,
    /// Bytes per row.
    pub(crate) width: usize,
    pub(crate) height: usize,
    pub(crate) dst_pitch: usize,
    pub(crate) src_pitch: usize,
}

impl MemcpyNode {
    /// A 1D copy of all of `src` into `dst` (sizes checked by the caller).
    fn linear(dst: Region, src: Region) -> Self {
        MemcpyNode {
            width: src.len,
            height: 1,
            dst_pitch: dst.len,
            src_pitch: src.len,
            dst,
            src,
        }
    }

    /// Direction of the copy.
    pub fn kind(&self) -> CopyKind {
        CopyKind::of(self.dst.space(), self.src.space())
    }
    /// Bytes copied.
    pub fn bytes(&self) -> usize {
        self.width * self.height
    }
    /// Rows (1 for a 1D copy).
    pub fn height(&self) -> usize {
        self.height
    }
    /// Destination and source offsets in their buffers, in bytes.
    pub fn offsets(&self) -> (usize, usize) {
        (self.dst.offset, self.src.offset)
    }
}

/// A 2D copy between pitched regions, for [`Dag::add_memcpy_2d`]. Pitches and width are in
/// elements of the regions' element type; each region starts at its first row.
#[derive(Clone, Debug)]
pub struct Copy2d {
    /// Destination (its start is the first row's first element).
    pub dst: Region,
    /// Elements between the starts of two destination rows.
    pub dst_pitch: usize,
    /// Source.
    pub src: Region,
    /// Elements between the starts of two source rows.
    pub src_pitch: usize,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
}

/// The value a memset writes: 1, 2 or 4 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemsetValue {
    /// One byte.
    U8(u8),
    /// Two bytes.
    U16(u16),
    /// Four bytes.
    U32(u32),
}

impl MemsetValue {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            MemsetValue::U8(_) => 1,
            MemsetValue::U16(_) => 2,
            MemsetValue::U32(_) => 4,
        }
    }
    pub(crate) fn bits(self) -> u32 {
        match self {
            MemsetValue::U8(v) => v as u32,
            MemsetValue::U16(v) => v as u32,
            MemsetValue::U32(v) => v,
        }
    }
}
impl From<u8> for MemsetValue {
    fn from(v: u8) -> Self {
        MemsetValue::U8(v)
    }
}
impl From<u16> for MemsetValue {
    fn from(v: u16) -> Self {
        MemsetValue::U16(v)
    }
}
impl From<u32> for MemsetValue {
    fn from(v: u32) -> Self {
        MemsetValue::U32(v)
    }
}
impl From<f32> for MemsetValue {
    fn from(v: f32) -> Self {
        MemsetValue::U32(v.to_bits())
    }
}

/// A memory fill of device memory, 1D (`height == 1`) or 2D.
#[derive(Clone, Debug)]
pub struct MemsetNode {
    pub(crate) dst: Region,
    pub(crate) value: MemsetValue,
    /// Elements of `value`'s size per row.
    pub(crate) width: usize,
    pub(crate) height: usize,
    /// Bytes between rows.
    pub(crate) pitch: usize,
}

impl MemsetNode {
    /// The value written.
    pub fn value(&self) -> MemsetValue {
        self.value
    }
    /// Bytes written.
    pub fn bytes(&self) -> usize {
        self.width * self.value.size() * self.height
    }
}

/// A 2D memset for [`Dag::add_memset_2d`]; pitch and width in elements of the region's type.
#[derive(Clone, Debug)]
pub struct Memset2d {
    /// Destination; its start is the first row.
    pub dst: Region,
    /// Elements between row starts.
    pub pitch: usize,
    /// Elements per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// The value.
    pub value: MemsetValue,
}

type HostClosure = dyn Fn() + Send + Sync + 'static;

/// A host closure and the record of its last panic.
pub(crate) struct HostFn {
    f: Box<HostClosure>,
    panicked: AtomicBool,
    message: Mutex<Option<String>>,
}

impl HostFn {
    pub(crate) fn new(f: impl Fn() + Send + Sync + 'static) -> Arc<HostFn> {
        Arc::new(HostFn {
            f: Box::new(f),
            panicked: AtomicBool::new(false),
            message: Mutex::new(None),
        })
    }

    /// Runs the closure, catching a panic (which must not unwind into CUDA).
    pub(crate) fn call(&self) {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| (self.f)())) {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic payload".into());
            *self.message.lock().unwrap_or_else(|p| p.into_inner()) = Some(msg);
            self.panicked.store(true, Ordering::Release);
        }
    }

    /// The message of a panic since the last call, if there was one.
    pub(crate) fn take_panic(&self) -> Option<String> {
        if !self.panicked.swap(false, Ordering::AcqRel) {
            return None;
        }
        self.message
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

/// The trampoline CUDA calls for host nodes.
///
/// # Safety
/// `data` is `Arc::as_ptr` of a live [`HostFn`] (the executable graph keeps it alive).
pub(crate) unsafe extern "C" fn host_trampoline(data: *mut std::ffi::c_void) {
    // SAFETY: see the function's contract. `call` never unwinds.
    let h = unsafe { &*(data as *const HostFn) };
    crate::track::as_host_node(|| h.call());
}

/// A Rust closure run by CUDA in stream order.
#[derive(Clone)]
pub struct HostNode {
    pub(crate) f: Arc<HostFn>,
}

/// A child graph: a whole [`Dag`] as one node.
#[derive(Clone)]
pub struct ChildNode {
    pub(crate) dag: Box<Dag>,
}

impl ChildNode {
    /// The embedded DAG.
    pub fn dag(&self) -> &Dag {
        &self.dag
    }
}

/// What a node does.
#[derive(Clone)]
#[non_exhaustive]
pub enum Op {
    /// A kernel launch.
    Kernel(KernelNode),
    /// A copy.
    Memcpy(MemcpyNode),
    /// A fill.
    Memset(MemsetNode),
    /// A host closure.
    Host(HostNode),
    /// Nothing.
    Empty,
    /// A child graph.
    Child(ChildNode),
    /// A cuFFT transform.
    Fft(FftNode),
}

/// A named node.
#[derive(Clone)]
pub struct Node {
    pub(crate) name: String,
    pub(crate) op: Op,
    pub(crate) enabled: bool,
    pub(crate) serial: u64,
}

impl Node {
    /// The node's name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// What the node does.
    pub fn op(&self) -> &Op {
        &self.op
    }
    /// Whether the node runs (only an [`Exec`] disables nodes).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
    /// The node's kind.
    pub fn kind(&self) -> NodeKind {
        match self.op {
            Op::Kernel(_) => NodeKind::Kernel,
            Op::Memcpy(_) => NodeKind::Memcpy,
            Op::Memset(_) => NodeKind::Memset,
            Op::Host(_) => NodeKind::Host,
            Op::Empty => NodeKind::Empty,
            Op::Child(_) => NodeKind::Child,
            Op::Fft(_) => NodeKind::Fft,
        }
    }
}

/// Why a DAG is invalid. Every variant names the node concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DagError {
    /// An edge would close a cycle; the nodes are listed in cycle order, the first repeated at
    /// the end.
    #[error("dependency would create a cycle: {}", .nodes.join(" -> "))]
    Cycle {
        /// The nodes of the cycle.
        nodes: Vec<String>,
    },
    /// A node id that is not (or no longer) in this DAG; the number is its serial.
    #[error("node #{0} is not in this DAG (removed, or from another DAG)")]
    UnknownNode(u64),
    /// Kernel arguments do not match the kernel.
    #[error("node `{node}`: kernel `{kernel}` {problem}")]
    KernelArgs {
        /// The node.
        node: String,
        /// The kernel.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
    /// A launch shape the device or kernel cannot run.
    #[error("node `{node}`: kernel `{kernel}` launch {problem}")]
    LaunchShape {
        /// The node.
        node: String,
        /// The kernel.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
    /// A copy or memset outside its buffers, or of mismatched sizes.
    #[error("node `{node}`: {problem}")]
    OutOfBounds {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A buffer or kernel of another device (or of a recording backend).
    #[error("node `{node}`: {problem}")]
    WrongDevice {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A node used in a way its kind does not allow.
    #[error("node `{node}`: {problem}")]
    WrongKind {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// An FFT node's plan, buffers or callbacks do not fit together.
    #[error("node `{node}`: {problem}")]
    Fft {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
}

/// A DAG of GPU work, built explicitly, node by node.
///
/// ```
/// use cudagraph::{Dag, DeviceLimits, LaunchConfig, RecordingBackend};
/// # fn main() -> cudagraph::Result<()> {
/// // Without a GPU, a recording backend stands in for the device.
/// let mut rec = RecordingBackend::new(DeviceLimits::hopper());
/// let x = rec.device_buffer::<f32>(1024);
/// let scale = rec.kernel("scale", &[8, 4, 4]); // (float*, float, int)
///
/// let mut dag = Dag::new();
/// let fill = dag.add_memset(&x, 0u32)?;
/// let k = dag.add_kernel(&scale, LaunchConfig::for_elements(1024, 256),
///                        &cudagraph::args![&x, 2.0f32, 1024i32])?;
/// dag.set_name(k, "scale x");
/// dag.add_dependency(fill, k)?;
/// assert!(dag.add_dependency(k, fill).is_err()); // a cycle
///
/// let calls = dag.lower(&mut rec)?;
/// assert_eq!(calls.len(), 2);
/// println!("{}", dag.to_dot());
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Dag {
    pub(crate) graph: StableDiGraph<Node, Dependency>,
    /// The serial number of the next node added.
    next_serial: u64,
}

fn oob(node: &str, problem: impl Into<String>) -> Error {
    Error::Dag(DagError::OutOfBounds {
        node: node.to_string(),
        problem: problem.into(),
    })
}

impl Dag {
    /// An empty DAG.
    pub fn new() -> Self {
        Dag::default()
    }

    /// The underlying petgraph graph, to run its algorithms on.
    pub fn graph(&self) -> &StableDiGraph<Node, Dependency> {
        &self.graph
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// Number of dependencies.
    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    /// The node `id`.
    pub fn node(&self, id: NodeId) -> Result<&Node> {
        self.graph
            .node_weight(id.idx)
            .filter(|n| n.serial == id.serial)
            .ok_or(Error::Dag(DagError::UnknownNode(id.serial)))
    }

    pub(crate) fn node_mut(&mut self, id: NodeId) -> Result<&mut Node> {
        self.graph
            .node_weight_mut(id.idx)
            .filter(|n| n.serial == id.serial)
            .ok_or(Error::Dag(DagError::UnknownNode(id.serial)))
    }

    /// The id of the node at petgraph index `idx` (which must hold a node).
    pub(crate) fn id_at(&self, idx: NodeIndex) -> NodeId {
        NodeId {
            idx,
            serial: self.graph[idx].serial,
        }
    }

    /// Every node id, in petgraph index order.
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.graph.node_indices().map(|i| self.id_at(i))
    }

    /// The node called `name`, if there is one (the first, if several share it).
    pub fn find(&self, name: &str) -> Option<NodeId> {
        self.graph
            .node_indices()
            .find(|&i| self.graph[i].name == name)
            .map(|i| self.id_at(i))
    }

    /// Renames a node; returns its id for chaining. An unknown id is ignored.
    pub fn set_name(&mut self, id: NodeId, name: impl Into<String>) -> NodeId {
        if let Ok(n) = self.node_mut(id) {
            n.name = name.into();
        }
        id
    }

    /// Sets the launch priority of kernel node `id` (`cudaLaunchAttributePriority`; a lower
    /// number is a higher priority, as for stream priorities). CUDA honours it only when the
    /// graph is instantiated with [`InstantiateFlags::use_node_priority`].
    pub fn set_priority(&mut self, id: NodeId, priority: i32) -> Result<()> {
        self.node_mut(id)?.kernel_mut()?.priority = Some(priority);
        Ok(())
    }

    fn push(&mut self, op: Op) -> NodeId {
        let serial = self.next_serial;
        self.next_serial += 1;
        let idx = self.graph.add_node(Node {
            name: String::new(),
            op,
            enabled: true,
            serial,
        });
        let n = &mut self.graph[idx];
        n.name = format!("{}#{serial}", n.kind().as_str());
        NodeId { idx, serial }
    }

    /// Adds a kernel launch. The arguments are checked against the kernel's parameter layout
    /// now; the launch shape when the DAG is validated for a device.
    pub fn add_kernel(
        &mut self,
        kernel: &Kernel,
        config: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<NodeId> {
        if let Some(problem) = kernel.args_problem(args) {
            let node = format!("kernel#{}", self.next_serial);
            return Err(Error::Dag(DagError::KernelArgs {
                node,
                kernel: kernel.name().to_string(),
                problem,
            }));
        }
        Ok(self.push(Op::Kernel(KernelNode {
            kernel: kernel.clone(),
            config,
            args: PackedArgs::new(kernel, args),
            priority: None,
        })))
    }

    /// Adds a 1D copy of all of `src` into all of `dst` (equal sizes). Either end may be a
    /// device buffer or a pinned host buffer (or a region of one).
    pub fn add_memcpy(&mut self, dst: impl Into<Region>, src: impl Into<Region>) -> Result<NodeId> {
        let (dst, src) = (dst.into(), src.into());
        let node = MemcpyNode::linear(dst, src);
        check_memcpy(&format!("memcpy#{}", self.next_serial), &node)?;
        Ok(self.push(Op::Memcpy(node)))
    }

    /// Adds a 2D (pitched) copy.
    pub fn add_memcpy_2d(&mut self, copy: Copy2d) -> Result<NodeId> {
        let name = format!("memcpy#{}", self.next_serial);
        if copy.dst.elem != copy.src.elem {
            return Err(oob(&name, "source and destination element sizes differ"));
        }
        let e = copy.dst.elem;
        let node = MemcpyNode {
            width: copy.width * e,
            height: copy.height,
            dst_pitch: copy.dst_pitch * e,
            src_pitch: copy.src_pitch * e,
            dst: copy.dst,
            src: copy.src,
        };
        check_memcpy(&name, &node)?;
        Ok(self.push(Op::Memcpy(node)))
    }

    /// Adds a 1D fill of `dst` (device memory) with `value`, repeated.
    pub fn add_memset(
        &mut self,
        dst: impl Into<Region>,
        value: impl Into<MemsetValue>,
    ) -> Result<NodeId> {
        let (dst, value) = (dst.into(), value.into());
        let node = MemsetNode {
            width: dst.len / value.size(),
            height: 1,
            pitch: dst.len,
            dst,
            value,
        };
        let name = format!("memset#{}", self.next_serial);
        if !node.dst.len.is_multiple_of(value.size()) {
            return Err(oob(
                &name,
                format!(
                    "{} bytes is not a whole number of {}-byte values",
                    node.dst.len,
                    value.size()
                ),
            ));
        }
        check_memset(&name, &node)?;
        Ok(self.push(Op::Memset(node)))
    }

    /// Adds a 2D fill.
    pub fn add_memset_2d(&mut self, m: Memset2d) -> Result<NodeId> {
        let name = format!("memset#{}", self.next_serial);
        let e = m.dst.elem;
        let row = m.width * e;
        if !row.is_multiple_of(m.value.size()) {
            return Err(oob(
                &name,
                format!("a {row}-byte row is not a whole number of values"),
            ));
        }
        let node = MemsetNode {
            width: row / m.value.size(),
            height: m.height,
            pitch: m.pitch * e,
            dst: m.dst,
            value: m.value,
        };
        check_memset(&name, &node)?;
        Ok(self.push(Op::Memset(node)))
    }

    /// Adds a host node running `f` in stream order. `f` must not call CUDA. A panic in `f`
    /// is caught and reported by the next [`Exec::launch`] or [`Exec::synchronize`].
    pub fn add_host(&mut self, f: impl Fn() + Send + Sync + 'static) -> NodeId {
        self.push(Op::Host(HostNode { f: HostFn::new(f) }))
    }

    /// Adds an empty node (a join or fork point).
    pub fn add_empty(&mut self) -> NodeId {
        self.push(Op::Empty)
    }

    /// Embeds a copy of `child` as one node.
    pub fn add_child(&mut self, child: &Dag) -> NodeId {
        self.push(Op::Child(ChildNode {
            dag: Box::new(child.clone()),
        }))
    }

    pub(crate) fn add_op(&mut self, op: Op) -> NodeId {
        self.push(op)
    }

    /// The serial number the next node added gets.
    pub(crate) fn next_serial(&self) -> u64 {
        self.next_serial
    }

    /// The default name the next node of `kind` gets (for errors before it is added).
    pub(crate) fn next_default_name(&self, kind: NodeKind) -> String {
        format!("{}#{}", kind.as_str(), self.next_serial)
    }

    fn check_id(&self, id: NodeId) -> Result<()> {
        self.node(id).map(|_| ())
    }

    /// Makes `after` wait for `before`. Rejects a self-loop or a cycle, listing its nodes.
    pub fn add_dependency(&mut self, before: NodeId, after: NodeId) -> Result<()> {
        self.check_id(before)?;
        self.check_id(after)?;
        if before == after {
            let n = self.graph[before.idx].name.clone();
            return Err(Error::Dag(DagError::Cycle {
                nodes: vec![n.clone(), n],
            }));
        }
        if self.graph.find_edge(before.idx, after.idx).is_some() {
            return Ok(());
        }
        if let Some(path) = self.path(after.idx, before.idx) {
            // path: after -> ... -> before; the new edge closes before -> after.
            let mut nodes: Vec<String> = std::iter::once(before.idx)
                .chain(path)
                .map(|i| self.graph[i].name.clone())
                .collect();
            if nodes.len() < 2 || nodes.last() != nodes.first() {
                nodes.push(self.graph[before.idx].name.clone());
            }
            return Err(Error::Dag(DagError::Cycle { nodes }));
        }
        self.graph.add_edge(before.idx, after.idx, Dependency);
        Ok(())
    }

    /// A path `from -> ... -> to` (both included), if one exists.
    fn path(&self, from: NodeIndex, to: NodeIndex) -> Option<Vec<NodeIndex>> {
        // Fast path: a node with no successors reaches nothing (the common case when a DAG is
        // built front to back).
        self.graph
            .neighbors_directed(from, Direction::Outgoing)
            .next()?;
        let mut parent: HashMap<NodeIndex, NodeIndex> = HashMap::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            if n == to {
                let mut path = vec![to];
                let mut cur = to;
                while cur != from {
                    cur = parent[&cur];
                    path.push(cur);
                }
                path.reverse();
                return Some(path);
            }
            for m in self.graph.neighbors_directed(n, Direction::Outgoing) {
                if m != from && !parent.contains_key(&m) {
                    parent.insert(m, n);
                    stack.push(m);
                }
            }
        }
        None
    }

    /// Chains `nodes`: each waits for the one before it.
    pub fn chain(&mut self, nodes: &[NodeId]) -> Result<()> {
        for w in nodes.windows(2) {
            self.add_dependency(w[0], w[1])?;
        }
        Ok(())
    }

    /// Makes every node of `after` wait for `before`.
    pub fn fan_out(&mut self, before: NodeId, after: &[NodeId]) -> Result<()> {
        after
            .iter()
            .try_for_each(|&a| self.add_dependency(before, a))
    }

    /// Makes `after` wait for every node of `before`.
    pub fn fan_in(&mut self, before: &[NodeId], after: NodeId) -> Result<()> {
        before
            .iter()
            .try_for_each(|&b| self.add_dependency(b, after))
    }

    /// The nodes `id` waits for (none for an unknown id).
    pub fn dependencies(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        let known = self.node(id).is_ok();
        self.graph
            .neighbors_directed(id.idx, Direction::Incoming)
            .filter(move |_| known)
            .map(|i| self.id_at(i))
    }

    /// Removes a node and its dependencies. Ids of other nodes stay valid; the removed node's
    /// id is rejected from now on.
    pub fn remove(&mut self, id: NodeId) -> Result<Node> {
        self.node(id)?;
        Ok(self
            .graph
            .remove_node(id.idx)
            .expect("the node was just found"))
    }

    // ---- editing parameters (for whole-graph updates) ------------------------------------

    /// Replaces a kernel node's arguments (checked like [`Dag::add_kernel`]).
    pub fn set_kernel_args(&mut self, id: NodeId, args: &[KernelArg]) -> Result<()> {
        let node = self.node_mut(id)?;
        node.check_kernel_args(args)?;
        let k = node.kernel_mut()?;
        for (i, a) in args.iter().enumerate() {
            k.args.set(i, a);
        }
        Ok(())
    }

    /// Replaces a kernel node's launch shape (checked at validation).
    pub fn set_launch_config(&mut self, id: NodeId, config: LaunchConfig) -> Result<()> {
        let node = self.node_mut(id)?;
        node.kernel_mut()?.config = config;
        Ok(())
    }

    /// Replaces a memset node's value (of the same size).
    pub fn set_memset_value(&mut self, id: NodeId, value: impl Into<MemsetValue>) -> Result<()> {
        let node = self.node_mut(id)?;
        let new = node.memset_with_value(value.into())?;
        node.op = Op::Memset(new);
        Ok(())
    }

    /// Replaces a 1D memcpy node's ends (same direction, same size rules as when adding).
    pub fn set_memcpy(
        &mut self,
        id: NodeId,
        dst: impl Into<Region>,
        src: impl Into<Region>,
    ) -> Result<()> {
        let node = self.node_mut(id)?;
        let new = node.memcpy_with_ends(dst.into(), src.into())?;
        node.op = Op::Memcpy(new);
        Ok(())
    }

    /// Replaces a host node's closure.
    pub fn set_host_fn(&mut self, id: NodeId, f: impl Fn() + Send + Sync + 'static) -> Result<()> {
        let node = self.node_mut(id)?;
        match &mut node.op {
            Op::Host(h) => {
                h.f = HostFn::new(f);
                Ok(())
            }
            _ => Err(node.wrong_kind("a host node")),
        }
    }

    // ---- validation ----------------------------------------------------------------------

    /// Checks the DAG for `device`: every launch shape against the device's and the kernel's
    /// limits, every buffer and kernel on this device. (Arguments, bounds and cycles were
    /// checked as the DAG was built.)
    pub fn validate(&self, device: &Device) -> Result<()> {
        self.validate_for(device.limits(), DeviceKey::Cuda(device.ordinal() as i32))
    }

    pub(crate) fn validate_for(&self, limits: &DeviceLimits, key: DeviceKey) -> Result<()> {
        for idx in self.graph.node_indices() {
            let node = &self.graph[idx];
            node.validate(limits, key)?;
        }
        Ok(())
    }

    /// The nodes in an order where every node comes after its dependencies: the canonical
    /// order, which depends only on the nodes and edges, not on the order edges were added in
    /// (among the nodes whose dependencies are all placed, the one added first comes first).
    /// Lowering creates CUDA nodes in this order.
    pub fn topological_order(&self) -> Vec<NodeId> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let bound = self.graph.node_bound();
        let mut waiting = vec![0usize; bound];
        let mut ready = BinaryHeap::new();
        for i in self.graph.node_indices() {
            waiting[i.index()] = self
                .graph
                .neighbors_directed(i, Direction::Incoming)
                .count();
            if waiting[i.index()] == 0 {
                ready.push(Reverse((self.graph[i].serial, i)));
            }
        }
        let mut order = Vec::with_capacity(self.graph.node_count());
        while let Some(Reverse((_, i))) = ready.pop() {
            order.push(self.id_at(i));
            for m in self.graph.neighbors_directed(i, Direction::Outgoing) {
                waiting[m.index()] -= 1;
                if waiting[m.index()] == 0 {
                    ready.push(Reverse((self.graph[m].serial, m)));
                }
            }
        }
        assert_eq!(
            order.len(),
            self.graph.node_count(),
            "a Dag has no cycles: add_dependency rejects them"
        );
        order
    }

    /// The dependencies of `id` in canonical order (by when they were added to the DAG).
    pub(crate) fn sorted_dependencies(&self, id: NodeId, out: &mut Vec<NodeIndex>) {
        out.clear();
        out.extend(self.graph.neighbors_directed(id.idx, Direction::Incoming));
        out.sort_unstable_by_key(|&i| self.graph[i].serial);
    }

    /// Every edge as (before, after).
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, NodeId)> + '_ {
        self.graph
            .edge_references()
            .map(|e| (self.id_at(e.source()), self.id_at(e.target())))
    }

    /// Every edge as a pair of serial numbers, sorted: equal for two DAGs exactly when they
    /// have the same dependencies between the same nodes.
    pub(crate) fn edge_serials(&self) -> Vec<(u64, u64)> {
        let mut e: Vec<(u64, u64)> = self
            .graph
            .edge_references()
            .map(|e| (self.graph[e.source()].serial, self.graph[e.target()].serial))
            .collect();
        e.sort_unstable();
        e
    }
}

impl Dag {
    /// Calls `f` for every allocation a node of the DAG (or of its child DAGs) refers to, once
    /// per reference.
    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<crate::memory::Allocation>)) {
        for n in self.graph.node_weights() {
            n.for_each_allocation(f);
        }
    }

    /// Every host closure of the DAG and its child DAGs, with its node's path of names.
    pub(crate) fn host_fns(&self, prefix: &str, out: &mut Vec<(String, Arc<HostFn>)>) {
        for n in self.graph.node_weights() {
            match &n.op {
                Op::Host(h) => out.push((format!("{prefix}{}", n.name), h.f.clone())),
                Op::Child(c) => c.dag.host_fns(&format!("{prefix}{}/", n.name), out),
                _ => {}
            }
        }
    }
}

impl Node {
    /// Calls `f` for every allocation the node refers to.
    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<crate::memory::Allocation>)) {
        match &self.op {
            Op::Kernel(k) => k.args.buffers.iter().flatten().for_each(f),
            Op::Memcpy(m) => {
                f(&m.dst.alloc);
                f(&m.src.alloc);
            }
            Op::Memset(m) => f(&m.dst.alloc),
            Op::Host(_) | Op::Empty => {}
            Op::Child(c) => c.dag.for_each_allocation(f),
            Op::Fft(x) => x.for_each_allocation(f),
        }
    }

    fn wrong_kind(&self, wanted: &str) -> Error {
        Error::Dag(DagError::WrongKind {
            node: self.name.clone(),
            problem: format!("is a {} node, not {wanted}", self.kind().as_str()),
        })
    }

    pub(crate) fn kernel_mut(&mut self) -> Result<&mut KernelNode> {
        if !matches!(self.op, Op::Kernel(_)) {
            return Err(self.wrong_kind("a kernel node"));
        }
        match &mut self.op {
            Op::Kernel(k) => Ok(k),
            _ => unreachable!(),
        }
    }

    /// What is wrong with `args` for this kernel node, as an error naming it.
    pub(crate) fn check_kernel_args(&self, args: &[KernelArg]) -> Result<()> {
        let Op::Kernel(k) = &self.op else {
            return Err(self.wrong_kind("a kernel node"));
        };
        match k.kernel.args_problem(args) {
            None => Ok(()),
            Some(problem) => Err(self.kernel_args_error(k, problem)),
        }
    }

    /// What is wrong with `arg` as argument `index` of this kernel node.
    pub(crate) fn check_kernel_arg(&self, index: usize, arg: &KernelArg) -> Result<()> {
        let Op::Kernel(k) = &self.op else {
            return Err(self.wrong_kind("a kernel node"));
        };
        match k.kernel.arg_problem(index, arg) {
            None => Ok(()),
            Some(problem) => Err(self.kernel_args_error(k, problem)),
        }
    }

    fn kernel_args_error(&self, k: &KernelNode, problem: String) -> Error {
        Error::Dag(DagError::KernelArgs {
            node: self.name.clone(),
            kernel: k.kernel.name().to_string(),
            problem,
        })
    }

    /// The memset node with `value` instead of its value (same size), checked.
    pub(crate) fn memset_with_value(&self, value: MemsetValue) -> Result<MemsetNode> {
        let Op::Memset(m) = &self.op else {
            return Err(self.wrong_kind("a memset node"));
        };
        if value.size() != m.value.size() {
            return Err(oob(
                &self.name,
                format!(
                    "the node writes {}-byte values; a {}-byte value cannot replace them",
                    m.value.size(),
                    value.size()
                ),
            ));
        }
        Ok(MemsetNode { value, ..m.clone() })
    }

    /// The 1D memcpy node with new ends (same direction), checked like when added.
    pub(crate) fn memcpy_with_ends(&self, dst: Region, src: Region) -> Result<MemcpyNode> {
        let Op::Memcpy(m) = &self.op else {
            return Err(self.wrong_kind("a memcpy node"));
        };
        let name = self.name.as_str();
        if m.height != 1 {
            return Err(oob(name, "set_memcpy replaces 1D copies; this one is 2D"));
        }
        let new = MemcpyNode::linear(dst, src);
        check_memcpy(name, &new)?;
        if new.kind() != m.kind() {
            return Err(oob(
                name,
                format!(
                    "the copy is {} and cannot become {}",
                    m.kind().as_str(),
                    new.kind().as_str()
                ),
            ));
        }
        Ok(new)
    }

    fn validate(&self, limits: &DeviceLimits, key: DeviceKey) -> Result<()> {
        let wrong = |problem: String| {
            Error::Dag(DagError::WrongDevice {
                node: self.name.clone(),
                problem,
            })
        };
        let check_region = |r: &Region, what: &str| -> Result<()> {
            if DeviceKey::of_owner(&r.alloc.owner) != key {
                return Err(wrong(format!(
                    "the {what} buffer belongs to {}, but the graph is for {}",
                    DeviceKey::of_owner(&r.alloc.owner),
                    key
                )));
            }
            Ok(())
        };
        match &self.op {
            Op::Kernel(k) => {
                let home = DeviceKey::of_kernel(&k.kernel);
                if home != key {
                    return Err(wrong(format!(
                        "kernel `{}` belongs to {home}, but the graph is for {key}",
                        k.kernel.name()
                    )));
                }
                for b in k.args.buffers.iter().flatten() {
                    if DeviceKey::of_owner(&b.owner) != key {
                        return Err(wrong(format!(
                            "a buffer argument belongs to {}, but the graph is for {key}",
                            DeviceKey::of_owner(&b.owner)
                        )));
                    }
                }
                if let Some(problem) = k.kernel.launch_problem(limits, &k.config) {
                    return Err(Error::Dag(DagError::LaunchShape {
                        node: self.name.clone(),
                        kernel: k.kernel.name().to_string(),
                        problem,
                    }));
                }
            }
            Op::Memcpy(m) => {
                check_region(&m.dst, "destination")?;
                check_region(&m.src, "source")?;
            }
            Op::Memset(m) => check_region(&m.dst, "destination")?,
            Op::Host(_) | Op::Empty => {}
            Op::Child(c) => c.dag.validate_for(limits, key).map_err(|e| match e {
                Error::Dag(inner) => Error::Dag(DagError::WrongKind {
                    node: self.name.clone(),
                    problem: format!("in the child graph: {inner}"),
                }),
                other => other,
            })?,
            Op::Fft(f) => f.validate(&self.name, key)?,
        }
        Ok(())
    }
}

/// Bounds and sizes of a copy.
fn check_memcpy(name: &str, m: &MemcpyNode) -> Result<()> {
    if m.height <= 1 {
        if m.dst.len != m.src.len {
            return Err(oob(
                name,
                format!(
                    "copies {} bytes into a {}-byte destination (sizes must match)",
                    m.src.len, m.dst.len
                ),
            ));
        }
    } else if m.dst_pitch < m.width || m.src_pitch < m.width {
        return Err(oob(
            name,
            format!(
                "a row of {} bytes is wider than the pitch (dst {}, src {})",
                m.width, m.dst_pitch, m.src_pitch
            ),
        ));
    }
    if rows_overlap(m) {
        return Err(oob(
            name,
            format!(
                "the source (bytes {}..) and the destination (bytes {}..) overlap in one buffer; \
                 CUDA copies need distinct memory",
                m.src.offset, m.dst.offset
            ),
        ));
    }
    for (r, pitch, what) in [
        (&m.dst, m.dst_pitch, "destination"),
        (&m.src, m.src_pitch, "source"),
    ] {
        let span = span(pitch, m.width, m.height);
        let end = r.offset.saturating_add(span);
        if end > r.alloc.bytes {
            return Err(oob(
                name,
                format!(
                    "the {what} range, bytes {}..{end}, is outside its {}-byte buffer",
                    r.offset, r.alloc.bytes
                ),
            ));
        }
    }
    Ok(())
}

/// Whether a copy's source and destination rows share a byte (only possible in one buffer).
fn rows_overlap(m: &MemcpyNode) -> bool {
    if !Arc::ptr_eq(&m.dst.alloc, &m.src.alloc) || m.width == 0 || m.height == 0 {
        return false;
    }
    let rows = |offset: usize, pitch: usize| {
        (0..m.height).map(move |r| {
            let start = offset.saturating_add(pitch.saturating_mul(r));
            (start, start.saturating_add(m.width))
        })
    };
    let (d0, s0) = (m.dst.offset, m.src.offset);
    let (d_end, s_end) = (
        d0.saturating_add(span(m.dst_pitch, m.width, m.height)),
        s0.saturating_add(span(m.src_pitch, m.width, m.height)),
    );
    if d0 >= s_end || s0 >= d_end {
        return false;
    }
    // Both row lists are sorted: walk them together.
    let (mut d, mut s) = (
        rows(d0, m.dst_pitch).peekable(),
        rows(s0, m.src_pitch).peekable(),
    );
    while let (Some(&(da, db)), Some(&(sa, sb))) = (d.peek(), s.peek()) {
        if da < sb && sa < db {
            return true;
        }
        if db <= sb {
            d.next();
        } else {
            s.next();
        }
    }
    false
}

fn check_memset(name: &str, m: &MemsetNode) -> Result<()> {
    if m.dst.space() != MemorySpace::Device {
        return Err(oob(
            name,
            "memset nodes write device memory, not host memory",
        ));
    }
    let row = m.width * m.value.size();
    if m.height > 1 && m.pitch < row {
        return Err(oob(
            name,
            format!(
                "a row of {row} bytes is wider than the {}-byte pitch",
                m.pitch
            ),
        ));
    }
    let end = m.dst.offset.saturating_add(span(m.pitch, row, m.height));
    if end > m.dst.alloc.bytes {
        return Err(oob(
            name,
            format!(
                "writes bytes {}..{end} of a {}-byte buffer",
                m.dst.offset, m.dst.alloc.bytes
            ),
        ));
    }
    Ok(())
}

/// Bytes from the first row's start to the last row's end.
fn span(pitch: usize, width: usize, height: usize) -> usize {
    if height == 0 {
        0
    } else {
        pitch.saturating_mul(height - 1).saturating_add(width)
    }
}

impl DeviceKey {
    pub(crate) fn of_owner(o: &Owner) -> DeviceKey {
        match o {
            Owner::Cuda(d) => DeviceKey::Cuda(d.ordinal() as i32),
            Owner::Recording(id) => DeviceKey::Recording(*id),
        }
    }
    pub(crate) fn of_kernel(k: &Kernel) -> DeviceKey {
        match k.home() {
            Ok(d) => DeviceKey::Cuda(d.ordinal() as i32),
            Err(id) => DeviceKey::Recording(id),
        }
    }
}

#[cfg(test)]
mod tests;
