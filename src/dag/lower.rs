//! Lowering: a validated [`Dag`] becomes one graph-construction call per node, in canonical
//! topological order, through the sealed [`Backend`] trait and its one `add_node` method.
//! [`CudaBackend`] (`lower/cuda.rs`) makes the CUDA runtime calls; [`RecordingBackend`]
//! (`lower/recording.rs`) logs them, so lowering is tested without a GPU.
//!
//! The contract: backends receive only nodes of a validated DAG (bounds, argument layouts,
//! launch shapes and devices checked). A backend may still fail (CUDA can), but it does not
//! re-validate.
//!
//! Nodes placed on other devices ([`Dag::place`]): before any node is added, the backend
//! enables peer access once for each `(from, to)` pair the nodes need (a node running on
//! `from` that uses device memory of `to`), then every node is added with its device current
//! (the backend is told only when the device changes from one node to the next).
//!
//! A node disabled in the DAG ([`Node::is_enabled`](super::Node::is_enabled): a DAG taken from
//! an [`Exec`](crate::Exec) that disabled it) is handed to the backend's `disable` after every
//! node was added: CUDA disables nodes in the executable graph, so instantiation does it
//! (`cudaGraphNodeSetEnabled`); the recording backend records that call.

use petgraph::visit::NodeIndexable;

use super::nodes::backend::Backend;
use super::nodes::conditional::{self, Scopes};
use super::nodes::device_update;
use super::nodes::graph_memory;
use super::nodes::ValidationTarget;
use super::{Dag, NodeId, Op, SerialOrder};
use crate::device::DeviceKey;
use crate::error::Result;
use crate::memory::MemorySpace;

impl Dag {
    /// What lowering needs to know about the whole DAG before it makes the first node, found
    /// in one pass over the nodes (lowering large DAGs is bound by passes over memory).
    pub(crate) fn lowering_plan(&self, home: DeviceKey) -> LoweringPlan {
        let mut serial = SerialOrder::new(self);
        let mut has_ffts = false;
        let mut peer_pairs = Vec::new();
        for i in self.graph.node_indices() {
            let n = &self.graph[i];
            serial.push(i, n.serial);
            has_ffts |= matches!(n.op, Op::Fft(_));
            let from = n.device.unwrap_or(home);
            n.for_each_allocation(&mut |a| {
                let to = a.owner.key();
                if to != from && a.space == MemorySpace::Device && !peer_pairs.contains(&(from, to))
                {
                    peer_pairs.push((from, to));
                }
            });
        }
        LoweringPlan {
            order: serial.finish().unwrap_or_else(|| self.ready_order()),
            has_ffts,
            peer_pairs,
        }
    }
}

/// What [`Dag::lowering_plan`] found.
pub(crate) struct LoweringPlan {
    /// The canonical order (see [`Dag::topological_order`]).
    pub(crate) order: Vec<NodeId>,
    /// Whether there are FFT nodes (whose work shares lowering then works out).
    pub(crate) has_ffts: bool,
    /// The `(from, to)` device pairs whose peer access the nodes need: a node running on
    /// `from` uses device memory of `to`. Each pair once, in the order first needed.
    pub(crate) peer_pairs: Vec<(DeviceKey, DeviceKey)>,
}

mod cuda;
mod recording;

pub use cuda::CudaBackend;
pub(crate) use cuda::{CudaDevices, CudaNodeKey, LoweredGraph};
pub use recording::{RecordedCall, RecordingBackend};

impl Dag {
    /// Validates the DAG for `backend`'s device and lowers it, returning the backend's handle
    /// of each node, indexed by [`NodeId::index`](super::NodeId::index) (`None` for holes left
    /// by removed nodes).
    pub fn lower<B: Backend>(&self, backend: &mut B) -> Result<Vec<Option<B::Node>>> {
        self.validate_on(&ValidationTarget::new(
            backend.key(),
            backend.limits(),
            &*backend,
            true,
        ))?;
        self.lower_validated(backend)
    }

    /// Lowers without validating: the caller has validated for this backend.
    pub(crate) fn lower_validated<B: Backend>(
        &self,
        backend: &mut B,
    ) -> Result<Vec<Option<B::Node>>> {
        self.lower_scoped(backend, &Scopes::default())
    }

    /// [`Dag::lower_validated`] for a graph with the conditional handles of `outer` in scope
    /// (a conditional body: the handles of the graphs it is inside).
    pub(crate) fn lower_scoped<B: Backend>(
        &self,
        backend: &mut B,
        outer: &Scopes,
    ) -> Result<Vec<Option<B::Node>>> {
        let mut handles: Vec<Option<B::Node>> = vec![None; self.graph.node_bound()];
        let mut deps: Vec<B::Node> = Vec::new();
        let mut dep_idx = Vec::new();
        // The edge data of a kernel's dependencies when one is programmatic (none in most
        // DAGs: then nothing is looked up per node).
        let mut edges = Vec::new();
        // Canonical order (nodes and each node's dependencies by serial): CUDA pairs the nodes
        // of two graphs in a whole-graph update by creation order and dependency order, so two
        // DAGs with the same nodes and edges lower to graphs CUDA pairs node by node, whatever
        // order their edges were added in.
        let home = backend.key();
        let plan = self.lowering_plan(home);
        let order = plan.order;
        let shares = if plan.has_ffts {
            super::nodes::fft::work_shares(self, &order)
        } else {
            Vec::new()
        };
        if !shares.is_empty() {
            backend.prepare_ffts(self, &shares)?;
        }
        // Peer access first, once per pair the nodes need (validation checked each is
        // possible); none in a DAG whose nodes use only their own device's memory.
        for &(from, to) in &plan.peer_pairs {
            backend.enable_peer_access(from, to)?;
        }
        if !plan.peer_pairs.is_empty() {
            backend.use_device(home)?;
        }
        // The conditional handles, before any node (kernels that set them may come before the
        // node that reads them); none in most DAGs.
        let own;
        let scopes = if self.conditionals.is_empty() {
            outer
        } else {
            own = conditional::create_handles(self, backend, outer)?;
            &own
        };
        let with_handles = self.conditionals.has_uses();
        // The graph allocations' addresses, by index, as their nodes are added (none in most
        // DAGs: nothing allocated).
        let with_memory = !self.graph_memory.is_empty();
        let mut addrs = vec![0u64; self.graph_memory.alloc_count()];
        // The device-updatable nodes' handles as their nodes are added (none in most DAGs).
        let with_device_nodes = !self.device_nodes.is_empty();
        let mut device_nodes = device_update::Lowering::new(self);
        // Each node on its device, switched only when it changes (never, unplaced).
        let mut current = home;
        // Nodes disabled in the DAG (an `Exec` disabled them): none in most DAGs, so nothing
        // is allocated.
        let mut disabled = Vec::new();
        for id in order {
            self.sorted_dependencies(id, &mut dep_idx);
            deps.clear();
            deps.extend(
                dep_idx
                    .iter()
                    .map(|p| handles[p.index()].expect("dependencies are lowered first")),
            );
            let node = &self.graph[id.idx];
            // Only a kernel node has programmatic dependencies (the builder's check).
            if matches!(node.op, Op::Kernel(_)) {
                self.edge_data(id, &dep_idx, &mut edges);
            }
            let device = node.device.unwrap_or(home);
            if device != current {
                backend.use_device(device)?;
                current = device;
            }
            let name = node.name();
            let h = match &node.op {
                Op::Kernel(k) if with_device_nodes && self.device_nodes.involves(id) => {
                    device_update::lower_kernel(
                        self,
                        id,
                        k,
                        &name,
                        backend,
                        &deps,
                        &edges,
                        scopes,
                        &addrs,
                        &mut device_nodes,
                    )?
                }
                Op::Kernel(k) if with_handles || with_memory || !edges.is_empty() => {
                    let at = LoweringAt {
                        deps: &deps,
                        edges: &edges,
                        scopes,
                        addrs: &addrs,
                    };
                    self.lower_kernel(id, k, &name, backend, &at)?
                }
                op if with_memory => {
                    match graph_memory::lower_node(op, &name, &deps, backend, &mut addrs)? {
                        Some(h) => h,
                        None => op.lower(&name, &deps, backend, scopes)?,
                    }
                }
                op => op.lower(&name, &deps, backend, scopes)?,
            };
            handles[id.index()] = Some(h);
            if !node.enabled {
                disabled.push((id, h));
            }
        }
        if current != home {
            backend.use_device(home)?;
        }
        // Kernels added before the device-updatable nodes they update get their handles.
        if with_device_nodes {
            device_update::finish(self, backend, scopes, &addrs, &device_nodes)?;
        }
        // The enabled flag is the executable graph's: disabled nodes are disabled after
        // instantiation (validation refused disabled nodes in child graphs).
        for (id, h) in disabled {
            backend.disable(&self.graph[id.idx].name(), h)?;
        }
        Ok(handles)
    }

    /// Adds kernel node `id` (`k`) after `at.deps` with `at.edges` (its edge data when a
    /// dependency is programmatic), whose arguments may pass conditional handles or graph
    /// buffers: a copy of its arguments with the handles (`at.scopes`) and addresses
    /// (`at.addrs`) of the graph being built; the node itself when it passes neither.
    fn lower_kernel<B: Backend>(
        &self,
        id: NodeId,
        k: &super::KernelNode,
        name: &super::NodeName<'_>,
        backend: &mut B,
        at: &LoweringAt<'_, B::Node>,
    ) -> Result<B::Node> {
        let handles = self.conditionals.has_uses() && conditional::kernel_uses(self, id);
        let buffers = !self.graph_memory.is_empty() && self.graph_memory.kernel_uses(id);
        if !handles && !buffers {
            return backend.add_node(name, at.deps, at.edges, super::nodes::NodeParams::Kernel(k));
        }
        let mut patched = k.clone();
        if handles {
            conditional::patch_kernel(self, id, &mut patched, name, at.scopes)?;
        }
        if buffers {
            graph_memory::patch_kernel(self, id, &mut patched, name, at.addrs)?;
        }
        backend.add_node(
            name,
            at.deps,
            at.edges,
            super::nodes::NodeParams::Kernel(&patched),
        )
    }
}

/// The lowering loop's state a kernel node is added with.
struct LoweringAt<'a, N> {
    /// The backend's handles of the node's dependencies, in canonical order.
    deps: &'a [N],
    /// Their edge data (empty: plain dependencies).
    edges: &'a [super::nodes::EdgeData],
    /// The conditional handles in scope.
    scopes: &'a Scopes,
    /// The graph allocations' addresses, by index.
    addrs: &'a [u64],
}
