//! The DAG builder: named nodes, dependencies, validation.
//!
//! A [`Dag`] is a `petgraph` [`StableDiGraph`] of [`Node`]s. Nodes are added with the `add_*`
//! methods, which check everything that does not depend on the target device right away
//! (kernel arguments against the kernel's parameter layout, copy and memset bounds); edges are
//! added with [`Dag::add_dependency`] and its helpers, which reject a self-loop or a cycle at
//! once, naming the nodes of the cycle. [`Dag::validate`] adds the checks that need the device
//! (launch shapes, every kernel on its node's device, every buffer on its node's device or
//! reachable from it by peer access). Nodes run on the device the DAG is lowered for, or on the
//! one they are placed on ([`Dag::place`]). Lowering ([`Dag::lower`]) and instantiation
//! ([`Dag::instantiate`]) run only on a validated DAG.

mod dot;
pub(crate) mod exec;
mod infer;
pub(crate) mod lower;
pub(crate) mod name;
pub(crate) mod nodes;
mod profile;
mod programmatic;

use std::collections::HashMap;
use std::sync::Arc;

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};
use petgraph::Direction;

use crate::device::Device;
use crate::error::{Error, Result};
use lower::CudaDevices;
use nodes::host::HostFn;
use nodes::{RunsOn, ValidationTarget};

pub use crate::device::DeviceKey;
pub use crate::error::DagError;
pub use exec::{Exec, InstantiateFlags, UpdateOutcome};
pub use infer::{Hazard, HazardKind, InferredEdge, Race};
pub use lower::{CudaBackend, RecordedCall, RecordingBackend};
pub use name::NodeName;
pub use nodes::{
    dst, src, Backend, CaptureFn, CaptureStream, CaptureWork, CapturedNode, ChildNode,
    CollectiveNode, ConditionalKind, ConditionalNode, Copy2d, CopyKind, Dst, EdgeData, EmptyNode,
    EventRecordNode, EventWaitNode, FftNode, FftSpec, HostNode, KernelNode, MemAllocNode,
    MemFreeNode, MemcpyNode, Memset2d, MemsetNode, MemsetValue, NodeKind, NodeParams, Op, Src,
};
pub use profile::{NodeTime, Profile};

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

/// An edge of the DAG: the source must finish before the target starts. Explicit (added with
/// [`Dag::add_dependency`] and its kin) or inferred from data access
/// ([`Dag::infer_dependencies`]), which keeps the hazard it prevents; or a programmatic edge
/// between two kernels ([`Dag::add_programmatic_dependency`]), after which the target may start
/// early and waits in `cudaGridDependencySynchronize()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dependency {
    inferred: Option<Box<Hazard>>,
    programmatic: Option<ProgrammaticPort>,
}

impl Dependency {
    /// The hazard an inferred edge prevents; `None` for an explicit edge.
    pub fn inferred(&self) -> Option<&Hazard> {
        self.inferred.as_deref()
    }

    /// The port of a programmatic edge ([`Dag::add_programmatic_dependency`]); `None` for a
    /// full dependency.
    pub fn programmatic(&self) -> Option<ProgrammaticPort> {
        self.programmatic
    }

    /// CUDA's data for this edge (`cudaGraphEdgeData`): all zero for a full dependency;
    /// `cudaGraphDependencyTypeProgrammatic` from the port for a programmatic edge.
    pub(crate) fn edge_data(&self) -> EdgeData {
        let mut e = EdgeData::default();
        if let Some(port) = self.programmatic {
            e.from_port = port.cuda_port();
            e.type_ =
                crate::sys::cudaGraphDependencyType::cudaGraphDependencyTypeProgrammatic as u8;
        }
        e
    }
}

/// When the kernel after a programmatic edge ([`Dag::add_programmatic_dependency`]) may start:
/// the edge's outgoing port on the kernel before it (`cudaGraphEdgeData::from_port`). Either
/// way the kernel after it must call `cudaGridDependencySynchronize()` before it touches what
/// the kernel before it writes: only then has that kernel completed and its writes become
/// visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProgrammaticPort {
    /// `cudaGraphKernelNodePortProgrammatic`: once every block of the kernel before has called
    /// `cudaTriggerProgrammaticLaunchCompletion()` or exited.
    Programmatic,
    /// `cudaGraphKernelNodePortLaunchCompletion`: once every block of the kernel before has
    /// started (or triggered), whether or not it calls the trigger.
    LaunchCompletion,
}

impl ProgrammaticPort {
    /// CUDA's port number (`cudaGraphKernelNodePort*`, `#define`s of `driver_types.h` that
    /// bindgen does not bind: `Programmatic` 1, `LaunchCompletion` 2; 0 is the default port,
    /// full completion).
    pub(crate) fn cuda_port(self) -> u8 {
        match self {
            ProgrammaticPort::Programmatic => 1,
            ProgrammaticPort::LaunchCompletion => 2,
        }
    }

    /// The port in words (DOT labels, errors): `programmatic`, `launch completion`.
    pub fn words(self) -> &'static str {
        match self {
            ProgrammaticPort::Programmatic => "programmatic",
            ProgrammaticPort::LaunchCompletion => "launch completion",
        }
    }
}

/// A named node.
#[derive(Clone)]
pub struct Node {
    /// The name given with [`Dag::set_name`]; `None`: the default `kind#serial`.
    pub(crate) given_name: Option<Box<str>>,
    pub(crate) op: Op,
    pub(crate) enabled: bool,
    pub(crate) serial: u64,
    /// The device the node is placed on ([`Dag::place`]); `None`: the device the DAG is
    /// lowered for.
    pub(crate) device: Option<DeviceKey>,
}

impl Node {
    /// The node's name: the one given with [`Dag::set_name`], or the default `kind#serial`.
    pub fn name(&self) -> NodeName<'_> {
        NodeName {
            given: self.given_name.as_deref(),
            kind: self.op.kind().as_str(),
            serial: self.serial,
        }
    }
    /// What the node does.
    pub fn op(&self) -> &Op {
        &self.op
    }
    /// Whether the node runs. Only an [`Exec`] disables nodes ([`Exec::set_enabled`]); a DAG
    /// taken from it keeps the flag, and instantiating that DAG disables the node too (nodes
    /// of a child graph cannot be disabled: validation refuses them). In [`Exec::dag`] the
    /// flag is CUDA's: a whole-graph update keeps it ([`Exec::update`]).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }
    /// The node's kind.
    pub fn kind(&self) -> NodeKind {
        self.op.kind()
    }
    /// The device the node is placed on ([`Dag::place`]), or `None` when it runs on the device
    /// the DAG is lowered for.
    pub fn device(&self) -> Option<DeviceKey> {
        self.device
    }
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
    /// Edges added from a later node to an earlier one (by serial; removals do not count
    /// down). While there are none, the canonical order is serial order.
    backward_edges: usize,
    /// Programmatic edges added ([`Dag::add_programmatic_dependency`]; removals do not count
    /// down). While there are none, lowering passes no edge data and validation has none to
    /// check.
    programmatic_edges: usize,
    /// Where kernel nodes added to this DAG keep their arguments (a copy starts a new one).
    pub(crate) arg_arena: crate::kernel::ArgArena,
    /// The conditional handles it declared, and its kernel arguments that pass one.
    pub(crate) conditionals: nodes::conditional::Handles,
    /// Its graph allocations, and the nodes that use a graph buffer.
    pub(crate) graph_memory: nodes::graph_memory::GraphMemory,
    /// Its device-updatable kernel nodes, and the kernel arguments that pass one.
    pub(crate) device_nodes: nodes::device_update::DeviceNodes,
    /// The device graphs its kernel nodes pass (and keep alive).
    pub(crate) device_graphs: nodes::device_launch::DeviceGraphs,
}

impl Dag {
    /// An empty DAG.
    pub fn new() -> Self {
        Dag::default()
    }

    /// An empty DAG with room for `nodes` nodes and `dependencies` dependencies: building a
    /// DAG of known size then never grows (and copies) its node and edge arrays.
    ///
    /// ```
    /// let dag = cudagraph::Dag::with_capacity(10_000, 9_999);
    /// assert!(dag.capacity().0 >= 10_000);
    /// ```
    pub fn with_capacity(nodes: usize, dependencies: usize) -> Self {
        Dag {
            graph: StableDiGraph::with_capacity(nodes, dependencies),
            ..Dag::default()
        }
    }

    /// How many nodes and dependencies the DAG holds before its arrays grow.
    pub fn capacity(&self) -> (usize, usize) {
        self.graph.capacity()
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
        // A match, not `ok_or`: the error is made (and dropped) only for an unknown id.
        match self.graph.node_weight(id.idx) {
            Some(n) if n.serial == id.serial => Ok(n),
            _ => Err(Error::Dag(DagError::UnknownNode(id.serial))),
        }
    }

    pub(crate) fn node_mut(&mut self, id: NodeId) -> Result<&mut Node> {
        match self.graph.node_weight_mut(id.idx) {
            Some(n) if n.serial == id.serial => Ok(n),
            _ => Err(Error::Dag(DagError::UnknownNode(id.serial))),
        }
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
            .find(|&i| self.graph[i].name() == name)
            .map(|i| self.id_at(i))
    }

    /// Renames a node; returns its id for chaining. An unknown id is ignored.
    pub fn set_name(&mut self, id: NodeId, name: impl Into<String>) -> NodeId {
        if let Ok(n) = self.node_mut(id) {
            n.given_name = Some(name.into().into_boxed_str());
        }
        id
    }

    #[inline]
    fn push(&mut self, op: Op) -> NodeId {
        let serial = self.next_serial;
        self.next_serial += 1;
        let idx = self.graph.add_node(Node {
            given_name: None,
            op,
            enabled: true,
            serial,
            device: None,
        });
        NodeId { idx, serial }
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
            let n = self.graph[before.idx].name().to_string();
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
                .map(|i| self.graph[i].name().to_string())
                .collect();
            if nodes.len() < 2 || nodes.last() != nodes.first() {
                nodes.push(self.graph[before.idx].name().to_string());
            }
            return Err(Error::Dag(DagError::Cycle { nodes }));
        }
        self.graph
            .add_edge(before.idx, after.idx, Dependency::default());
        if before.serial > after.serial {
            self.backward_edges += 1;
        }
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
    /// All or nothing: if one edge is refused (it would close a cycle, or names an unknown
    /// node), none of them is added.
    pub fn chain(&mut self, nodes: &[NodeId]) -> Result<()> {
        self.add_dependencies(nodes.windows(2).map(|w| (w[0], w[1])))
    }

    /// Makes every node of `after` wait for `before`.
    /// All or nothing: if one edge is refused (it would close a cycle, or names an unknown
    /// node), none of them is added.
    pub fn fan_out(&mut self, before: NodeId, after: &[NodeId]) -> Result<()> {
        self.add_dependencies(after.iter().map(|&a| (before, a)))
    }

    /// Makes `after` wait for every node of `before`.
    /// All or nothing: if one edge is refused (it would close a cycle, or names an unknown
    /// node), none of them is added.
    pub fn fan_in(&mut self, before: &[NodeId], after: NodeId) -> Result<()> {
        self.add_dependencies(before.iter().map(|&b| (b, after)))
    }

    /// Adds every `(before, after)` edge, or none: on an error the edges this call added are
    /// taken out again, so a refused `chain`, `fan_out` or `fan_in` leaves the DAG as it was.
    fn add_dependencies(&mut self, edges: impl Iterator<Item = (NodeId, NodeId)>) -> Result<()> {
        let mut added = Vec::new();
        for (before, after) in edges {
            let had = self.graph.find_edge(before.idx, after.idx).is_some();
            if let Err(e) = self.add_dependency(before, after) {
                for (b, a) in added.into_iter().rev() {
                    self.remove_dependency(b, a);
                }
                return Err(e);
            }
            if !had {
                added.push((before, after));
            }
        }
        Ok(())
    }

    /// Takes out the edge `before -> after` that `add_dependency` added.
    fn remove_dependency(&mut self, before: NodeId, after: NodeId) {
        if let Some(e) = self.graph.find_edge(before.idx, after.idx) {
            self.graph.remove_edge(e);
            if before.serial > after.serial {
                self.backward_edges -= 1;
            }
        }
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

    // ---- placement -----------------------------------------------------------------------

    /// Places node `id` on `device`: it runs there, whatever device the DAG is lowered for
    /// (unplaced nodes run on that one, the DAG's *home* device). Returns `id` for chaining.
    ///
    /// Kernel, copy, memset, host and empty nodes can be placed. A kernel node's kernel must
    /// be of its device (a [`Kernel`](crate::Kernel) is loaded per device); every buffer a
    /// kernel, copy or memset node uses must be on its device, be pinned host memory, or be on
    /// a device its device can access by peer ([`Device::can_access_peer`]): lowering enables
    /// that peer access (`cudaDeviceEnablePeerAccess`, once per pair). A copy between buffers
    /// of two GPUs is an ordinary copy node (unified addressing) and may be placed on either
    /// of them; it runs on the device it is placed on (unplaced: the home device), which must
    /// reach the other. Validation ([`Dag::validate`], and lowering) checks all this per node.
    ///
    /// FFT, captured, collective and child-graph nodes run on the home device and cannot be
    /// placed ([`DagError::Placement`]); nodes inside a child graph run where the child runs,
    /// so validation refuses a child DAG with nodes placed on another device.
    pub fn place(&mut self, id: NodeId, device: &Device) -> Result<NodeId> {
        self.place_on(id, device.key())
    }

    /// [`Dag::place`] by device key: a CUDA device's ([`Device::key`]) or a
    /// [`RecordingBackend`]'s device ([`RecordingBackend::device_key`]). Whether the device
    /// exists is checked when the DAG is validated for a backend.
    pub fn place_on(&mut self, id: NodeId, device: DeviceKey) -> Result<NodeId> {
        let node = self.node_mut(id)?;
        if !node.op.placeable() {
            return Err(Error::Dag(DagError::Placement {
                node: node.name().to_string(),
                problem: format!(
                    "{} nodes cannot be placed: FFT, captured, collective and child-graph nodes \
                     run on the device the DAG is lowered for",
                    node.kind().as_str()
                ),
            }));
        }
        node.device = Some(device);
        Ok(id)
    }

    /// Takes node `id` off the device it was placed on: it runs on the home device again.
    pub fn unplace(&mut self, id: NodeId) -> Result<NodeId> {
        self.node_mut(id)?.device = None;
        Ok(id)
    }

    // ---- validation ----------------------------------------------------------------------

    /// Checks the DAG for `device` (its home device): every launch shape against the
    /// device's and the kernel's limits, every kernel on its node's device (placed with
    /// [`Dag::place`], else `device`), every buffer on its node's device or reachable from it
    /// by peer access. (Arguments, bounds and cycles were checked as the DAG was built.)
    pub fn validate(&self, device: &Device) -> Result<()> {
        let devices = CudaDevices::default();
        self.validate_on(&ValidationTarget::new(
            device.key(),
            device.limits(),
            &devices,
            true,
        ))
    }

    /// Validates every node on its device within `target`.
    pub(crate) fn validate_on(&self, target: &ValidationTarget<'_>) -> Result<()> {
        // A DAG that declares conditional handles validates its nodes in its own scope.
        let own = if self.conditionals.is_empty() {
            None
        } else {
            nodes::conditional::validate_handles(self, target)?
        };
        let target = own.as_ref().unwrap_or(target);
        if !self.graph_memory.is_empty() {
            nodes::graph_memory::validate(self, target)?;
        }
        if !self.device_nodes.is_empty() {
            nodes::device_update::validate(self, target)?;
        }
        if !self.device_graphs.is_empty() {
            nodes::device_launch::validate(self, target)?;
        }
        if self.programmatic_edges > 0 {
            programmatic::validate(self, target)?;
        }
        for idx in self.graph.node_indices() {
            let node = &self.graph[idx];
            if !node.enabled && !target.placeable {
                // CUDA disables nodes of the executable graph itself (`cudaGraphNodeSetEnabled`
                // names a node of the graph it was instantiated from), not inside a child graph.
                return Err(Error::Dag(DagError::WrongKind {
                    node: node.name().to_string(),
                    problem: "is disabled, but CUDA disables only nodes of the instantiated \
                              graph itself, not nodes of a child graph"
                        .into(),
                }));
            }
            let key = match node.device {
                Some(k) if k != target.home => {
                    let problem = if !target.placeable {
                        format!(
                            "is placed on {k}, but the nodes of a child graph run on the graph's \
                             device ({})",
                            target.home
                        )
                    } else if !target.devices.has_device(k) {
                        format!(
                            "is placed on {k}, which is not a device of the backend (the graph \
                             is for {})",
                            target.home
                        )
                    } else {
                        String::new()
                    };
                    if !problem.is_empty() {
                        return Err(Error::Dag(DagError::Placement {
                            node: node.name().to_string(),
                            problem,
                        }));
                    }
                    k
                }
                _ => target.home,
            };
            node.op.validate(&node.name(), &RunsOn { key, target })?;
        }
        Ok(())
    }

    /// The nodes in an order where every node comes after its dependencies: the canonical
    /// order, which depends only on the nodes and edges, not on the order edges were added in
    /// (among the nodes whose dependencies are all placed, the one added first comes first).
    /// Lowering creates CUDA nodes in this order.
    pub fn topological_order(&self) -> Vec<NodeId> {
        self.serial_order().unwrap_or_else(|| self.ready_order())
    }

    /// The canonical order by Kahn's algorithm: ready nodes by serial.
    fn ready_order(&self) -> Vec<NodeId> {
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

    /// The nodes by serial, when that is the canonical order: every edge goes from an earlier
    /// node to a later one (the DAG was built front to back), so the first node not yet placed
    /// has all its dependencies placed and is the first ready one. `None` when an edge goes
    /// backwards, or when petgraph's index order (which reuses the slots of removed nodes) is
    /// not serial order.
    fn serial_order(&self) -> Option<Vec<NodeId>> {
        let mut serial = SerialOrder::new(self);
        for i in self.graph.node_indices() {
            serial.push(i, self.graph[i].serial);
        }
        serial.finish()
    }

    /// The dependencies of `id` in canonical order (by when they were added to the DAG).
    pub(crate) fn sorted_dependencies(&self, id: NodeId, out: &mut Vec<NodeIndex>) {
        out.clear();
        out.extend(self.graph.neighbors_directed(id.idx, Direction::Incoming));
        out.sort_unstable_by_key(|&i| self.graph[i].serial);
    }

    /// The edge data of `id`'s dependencies in the order [`Dag::sorted_dependencies`] put them
    /// in (`deps`), into `out`; left empty when none is programmatic (plain dependencies: no
    /// edge data, the kernel-specific call).
    pub(crate) fn edge_data(&self, id: NodeId, deps: &[NodeIndex], out: &mut Vec<EdgeData>) {
        out.clear();
        if self.programmatic_edges == 0
            || !self
                .graph
                .edges_directed(id.idx, Direction::Incoming)
                .any(|e| e.weight().programmatic.is_some())
        {
            return;
        }
        out.extend(deps.iter().map(|&p| {
            let e = self
                .graph
                .find_edge(p, id.idx)
                .expect("`deps` are the node's dependencies");
            self.graph[e].edge_data()
        }));
    }

    /// The programmatic edges as (before, after, port) by serial, sorted: equal for two DAGs
    /// with the same edges exactly when the same edges are programmatic, with the same ports.
    pub(crate) fn programmatic_serials(&self) -> Vec<(u64, u64, ProgrammaticPort)> {
        if self.programmatic_edges == 0 {
            return Vec::new();
        }
        let mut e: Vec<_> = self
            .graph
            .edge_references()
            .filter_map(|e| {
                let port = e.weight().programmatic?;
                Some((
                    self.graph[e.source()].serial,
                    self.graph[e.target()].serial,
                    port,
                ))
            })
            .collect();
        e.sort_unstable();
        e
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
            n.op.host_fns(prefix, &n.name(), out);
        }
    }
}

/// The nodes by serial, collected in index order while that is the canonical order (see
/// [`Dag::serial_order`]).
struct SerialOrder {
    /// `None` once it is not.
    order: Option<Vec<NodeId>>,
    next: u64,
}

impl SerialOrder {
    fn new(dag: &Dag) -> Self {
        SerialOrder {
            order: (dag.backward_edges == 0).then(|| Vec::with_capacity(dag.graph.node_count())),
            next: 0,
        }
    }

    /// The node at `idx`, the next in index order.
    fn push(&mut self, idx: NodeIndex, serial: u64) {
        if serial < self.next {
            self.order = None;
        }
        if let Some(order) = &mut self.order {
            order.push(NodeId { idx, serial });
            self.next = serial + 1;
        }
    }

    fn finish(self) -> Option<Vec<NodeId>> {
        self.order
    }
}

impl Node {
    /// Calls `f` for every allocation the node refers to.
    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<crate::memory::Allocation>)) {
        self.op.for_each_allocation(f)
    }

    pub(crate) fn wrong_kind(&self, wanted: &str) -> Error {
        Error::Dag(DagError::WrongKind {
            node: self.name().to_string(),
            problem: {
                let kind = self.kind().as_str();
                // "an empty node", "a kernel node".
                let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
                    "an"
                } else {
                    "a"
                };
                format!("is {article} {kind} node, not {wanted}")
            },
        })
    }
}

#[cfg(test)]
mod attribute_tests;
#[cfg(test)]
mod conditional_tests;
#[cfg(test)]
mod device_launch_tests;
#[cfg(test)]
mod device_update_tests;
#[cfg(test)]
mod enabled_tests;
#[cfg(test)]
mod event_tests;
#[cfg(test)]
mod gemm_tests;
#[cfg(test)]
mod graph_memory_tests;
#[cfg(test)]
mod infer_tests;
#[cfg(test)]
mod kernel_tests;
#[cfg(test)]
mod placement_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod programmatic_tests;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;
