//! Device-updatable kernel nodes (CUDA 12.4+): a kernel node whose arguments, grid or enabled
//! state another kernel of the same graph changes on the GPU (`cudaGraphKernelNodeSetParam`,
//! `cudaGraphKernelNodeSetGridDim`, `cudaGraphKernelNodeSetEnabled`,
//! `cudaGraphKernelNodeUpdatesApply`), e.g. a data-dependent grid size chosen by an earlier
//! kernel, with no host round trip.
//!
//! [`Dag::device_node`] marks a kernel node device-updatable and hands out its [`DeviceNode`],
//! which the updating kernels take as an argument (`cudaGraphDeviceNode_t`). It is a late value
//! (`nodes/late.rs`): CUDA gives the handle when the node is added with the launch attribute
//! `cudaLaunchAttributeDeviceUpdatableKernelNode` (`NodeParams::DeviceUpdatableKernel`, which
//! hands it back to lowering), so an updating kernel added before its target (the usual order:
//! it decides, then the target runs) is added with a null handle and given the real one once
//! every node exists (`Backend::set_kernel_params`, `cudaGraphKernelNodeSetParams` on the graph
//! being built, before instantiation). An [`Exec`](crate::Exec)'s copy of the DAG holds the
//! handles, so per-node updates of an updating kernel's other arguments pass them on; an update
//! that would pass or replace one is refused, as is a stream launch with one.
//!
//! CUDA's rules (the `cudaLaunchAttributeDeviceUpdatableKernelNode` and
//! `cudaGraphInstantiate` docs, <https://docs.nvidia.com/cuda/cuda-runtime-api/>), and how the
//! crate keeps them:
//! - a graph with device-updatable nodes has at most one executable graph at a time: every
//!   [`Exec`](crate::Exec) lowers into a graph of its own;
//! - neither that graph nor its executable graph may be passed to `cudaGraphExecUpdate`:
//!   [`Exec::update`](crate::Exec::update) refuses such DAGs (naming the node), and
//!   [`Exec::update_or_reinstantiate`](crate::Exec::update_or_reinstantiate) instantiates
//!   again;
//! - the nodes cannot be removed from their graph, nor opt out: the crate never does either;
//! - the graph must be uploaded (`cudaGraphUpload`) before it is launched, and again after a
//!   host-side update of a device-updatable node: the `Exec` uploads on the launch stream
//!   before its first launch and before the first launch after such an update;
//! - the updating kernel runs on the device of the node it updates: validation refuses both
//!   placed on another device.
//!
//! The crate's own rules (validation, naming the node): device nodes and the kernels passing
//! them are nodes of the DAG that is instantiated, not of a child graph or conditional body
//! (CUDA clones a child graph; lowering gives handles within one graph); a kernel passes only
//! device nodes of its own DAG; a device node's kernel node must not have been removed.
//!
//! A device-side update lasts: later launches run with it until the host updates the node
//! (CUDA's upload then restores the host's parameters).

use std::cell::Cell;

use super::{KernelNode, ValidationTarget};
use crate::dag::nodes::backend::{Backend, NodeParams};
use crate::dag::nodes::conditional::{self, Scopes};
use crate::dag::nodes::graph_memory;
use crate::dag::nodes::late::{self, LateKey, LateValues, UpdateProblem};
use crate::dag::{Dag, NodeId, NodeName, Op};
use crate::error::{DagError, Error, Result};
use crate::kernel::{DeviceNode, KernelArg};

impl LateKey for DeviceNode {
    fn scope(&self) -> u64 {
        self.scope
    }
    fn index(&self) -> u32 {
        self.index
    }
}

/// A DAG's device-updatable kernel nodes (by [`DeviceNode::index`]) and the kernel arguments
/// that pass one of their handles.
#[derive(Clone, Default)]
pub(crate) struct DeviceNodes {
    /// The kernel node of each device node, by index.
    targets: Vec<NodeId>,
    /// The scope of the device nodes declared, and the kernel parameters passing one (late
    /// values).
    late: LateValues<DeviceNode>,
}

impl DeviceNodes {
    /// Whether the DAG has nothing to do with device-updatable nodes (most DAGs: one test).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.late.is_empty()
    }

    /// Whether some kernel node passes a device node.
    #[inline]
    pub(crate) fn has_uses(&self) -> bool {
        !self.late.is_empty()
    }

    /// How many device nodes the DAG declared.
    pub(crate) fn count(&self) -> usize {
        self.targets.len()
    }

    /// The device node of kernel node `id`, if it is device-updatable.
    pub(crate) fn index_of(&self, id: NodeId) -> Option<u32> {
        self.targets.iter().position(|&t| t == id).map(|i| i as u32)
    }

    /// Whether kernel node `id` is device-updatable or passes a device node.
    pub(crate) fn involves(&self, id: NodeId) -> bool {
        self.index_of(id).is_some() || self.late.kernel_uses(id)
    }

    /// Notes which arguments of kernel node `id` pass a device node (`args` are all its
    /// arguments, after they were accepted).
    pub(crate) fn note_args(&mut self, id: NodeId, args: &[KernelArg<'_>]) {
        self.late.note_args(id, args, |a| a.device_node);
    }

    /// Why an [`Exec`](crate::Exec) update of kernel node `id` with `args` (by parameter) is
    /// refused, if it is: a new argument is a device node, or replaces one.
    pub(crate) fn exec_update_problem<'a>(
        &self,
        id: NodeId,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
    ) -> Option<String> {
        let problem = self
            .late
            .update_problem(id, args, |a| a.device_node.is_some())?;
        Some(match problem {
            UpdateProblem::Passes(i) => format!(
                "argument {i} is a device-updatable node's handle: an instantiated graph's kernel \
                 nodes keep the handles they were lowered with (update the DAG and instantiate \
                 it again)"
            ),
            UpdateProblem::Replaces(i) => format!(
                "argument {i} passes a device-updatable node's handle, which an update cannot \
                 replace (update the node's other arguments with Exec::set_kernel_arg)"
            ),
        })
    }
}

impl Dag {
    /// Makes kernel node `id` device-updatable (CUDA 12.4+): kernels of this DAG given the
    /// returned [`DeviceNode`] as an argument (`cudaGraphDeviceNode_t`; source includes
    /// [`DEVICE_UPDATE_INCLUDE`](crate::DEVICE_UPDATE_INCLUDE)) can change its arguments
    /// (`cudaGraphKernelNodeSetParam`), grid (`cudaGraphKernelNodeSetGridDim`) or enabled
    /// state (`cudaGraphKernelNodeSetEnabled`) on the GPU, e.g. an earlier kernel sizing its
    /// grid from data. Asking again for the same node gives the same handle.
    ///
    /// Such a DAG cannot be updated as a whole on an [`Exec`](crate::Exec) (CUDA's rule:
    /// [`Exec::update_or_reinstantiate`](crate::Exec::update_or_reinstantiate) instantiates
    /// again). A device-side change lasts for later launches until a host-side update of the
    /// node.
    pub fn device_node(&mut self, id: NodeId) -> Result<DeviceNode> {
        let node = self.node(id)?;
        if !matches!(node.op, Op::Kernel(_)) {
            return Err(node.wrong_kind("a kernel node"));
        }
        let d = &mut self.device_nodes;
        let scope = d.late.declare();
        let index = match d.targets.iter().position(|&t| t == id) {
            Some(i) => i,
            None => {
                d.targets.push(id);
                d.targets.len() - 1
            }
        };
        Ok(DeviceNode {
            scope,
            index: index as u32,
        })
    }

    /// The name of the first device-updatable kernel node, if the DAG has one (a whole-graph
    /// update is refused for such a DAG).
    pub(crate) fn device_updatable_node(&self) -> Option<String> {
        self.device_nodes
            .targets
            .iter()
            .find_map(|&t| self.node(t).ok())
            .map(|n| n.name().to_string())
    }
}

/// An error naming `node`.
fn error(node: String, problem: String) -> Error {
    Error::Dag(DagError::WrongKind { node, problem })
}

/// Validation of a DAG with device-updatable nodes or kernels passing a device node (see the
/// module's docs for the rules).
pub(crate) fn validate(dag: &Dag, target: &ValidationTarget<'_>) -> Result<()> {
    let d = &dag.device_nodes;
    let name = |id: NodeId| dag.graph[id.idx].name().to_string();
    if !target.placeable {
        let first = d
            .targets
            .iter()
            .copied()
            .chain(d.late.iter().map(|u| u.0))
            .find(|&id| dag.node(id).is_ok());
        if let Some(id) = first {
            return Err(error(
                name(id),
                "is device-updatable or passes a device-updatable node's handle, but it is \
                 inside a child graph or a conditional body: device-updatable nodes and the \
                 kernels updating them are nodes of the DAG that is instantiated"
                    .into(),
            ));
        }
        return Ok(());
    }
    let placed = |id: NodeId| match dag.graph[id.idx].device {
        Some(k) if k != target.home => Some(k),
        _ => None,
    };
    for (i, &t) in d.targets.iter().enumerate() {
        if dag.node(t).is_err() {
            // The node was removed: no kernel passing its handle may remain.
            if let Some((user, p, _)) = d
                .late
                .args()
                .find(|&(u, _, k)| k.index as usize == i && dag.node(u).is_ok())
            {
                return Err(error(
                    name(user),
                    format!(
                        "argument {p} is device node #{i}, whose kernel node was removed from \
                         the DAG"
                    ),
                ));
            }
            continue;
        }
        if let Some(k) = placed(t) {
            return Err(error(
                name(t),
                format!(
                    "is device-updatable (device node #{i}) but placed on {k}: a \
                     device-updatable node runs on the graph's device ({}), where the kernels \
                     updating it run",
                    target.home
                ),
            ));
        }
    }
    for (id, param, key) in d.late.args() {
        let Ok(node) = dag.node(id) else { continue };
        let problem = if key.scope != d.late.scope() || key.index as usize >= d.targets.len() {
            format!(
                "argument {param} is device node #{} of another DAG: a kernel passes only the \
                 device-updatable nodes of its own DAG",
                key.index
            )
        } else if matches!(&node.op, Op::Kernel(k) if k.kernel().raw().is_some_and(|c| c.is_function()))
        {
            format!(
                "argument {param} is device node #{}, but the kernel is a cudarc function, \
                 whose node cannot be given the handle once the graph is built (the runtime's \
                 cudaGraphKernelNodeSetParams refuses a CUfunction)",
                key.index
            )
        } else if let Some(k) = placed(id) {
            format!(
                "argument {param} is device node #{}, but the node is placed on {k}: a kernel \
                 updates only nodes of its own device ({})",
                key.index, target.home
            )
        } else {
            continue;
        };
        return Err(Error::Dag(DagError::WrongKind {
            node: node.name().to_string(),
            problem,
        }));
    }
    Ok(())
}

/// Device-node handles as lowering learns them, and the kernels added before the handles they
/// pass existed.
pub(crate) struct Lowering<N> {
    /// The handle of each device node, by index (0: not added yet).
    values: Vec<u64>,
    /// Kernel nodes added with a null handle in an argument: node, backend handle.
    deferred: Vec<(NodeId, N)>,
}

impl<N: Copy> Lowering<N> {
    /// For `dag` (none of its nodes added yet).
    pub(crate) fn new(dag: &Dag) -> Self {
        Lowering {
            values: vec![0; dag.device_nodes.count()],
            deferred: Vec::new(),
        }
    }
}

/// A copy of kernel node `id` of `dag` with the conditional handles, graph-buffer addresses and
/// device-node handles (0 for those not known yet) of the graph being built; whether a handle
/// was missing.
fn patched(
    dag: &Dag,
    id: NodeId,
    k: &KernelNode,
    name: &NodeName<'_>,
    scopes: &Scopes,
    addrs: &[u64],
    values: &[u64],
) -> Result<(KernelNode, bool)> {
    let mut p = k.clone();
    if dag.conditionals.has_uses() && conditional::kernel_uses(dag, id) {
        conditional::patch_kernel(dag, id, &mut p, name, scopes)?;
    }
    if !dag.graph_memory.is_empty() && dag.graph_memory.kernel_uses(id) {
        graph_memory::patch_kernel(dag, id, &mut p, name, addrs)?;
    }
    let mut missing = false;
    dag.device_nodes.late.patch_kernel(id, &mut p, |key| {
        let v = values.get(key.index as usize).copied().unwrap_or(0);
        missing |= v == 0;
        Ok(v)
    })?;
    Ok((p, missing))
}

/// Adds kernel node `id` (`k`) of `dag`, device-updatable or passing a device node, after
/// `deps` with `edges`: the handles known so far in its arguments (the others are given by
/// [`finish`]); a device-updatable node's handle is noted in `state`.
#[allow(clippy::too_many_arguments)] // reason: the lowering loop's state, passed as is
pub(crate) fn lower_kernel<B: Backend>(
    dag: &Dag,
    id: NodeId,
    k: &KernelNode,
    name: &NodeName<'_>,
    backend: &mut B,
    deps: &[B::Node],
    edges: &[super::EdgeData],
    scopes: &Scopes,
    addrs: &[u64],
    state: &mut Lowering<B::Node>,
) -> Result<B::Node> {
    let (p, missing) = patched(dag, id, k, name, scopes, addrs, &state.values)?;
    let h = match dag.device_nodes.index_of(id) {
        Some(i) => {
            let dev_node = Cell::new(0);
            let h = backend.add_node(
                name,
                deps,
                edges,
                NodeParams::DeviceUpdatableKernel {
                    node: &p,
                    index: i,
                    dev_node: &dev_node,
                },
            )?;
            state.values[i as usize] = dev_node.get();
            h
        }
        None => backend.add_node(name, deps, edges, NodeParams::Kernel(&p))?,
    };
    if missing {
        state.deferred.push((id, h));
    }
    Ok(h)
}

/// Gives the kernels added before the device nodes they pass their handles
/// (`cudaGraphKernelNodeSetParams` on the graph being built), once every node was added.
pub(crate) fn finish<B: Backend>(
    dag: &Dag,
    backend: &mut B,
    scopes: &Scopes,
    addrs: &[u64],
    state: &Lowering<B::Node>,
) -> Result<()> {
    for &(id, h) in &state.deferred {
        let node = &dag.graph[id.idx];
        let Op::Kernel(k) = &node.op else {
            continue;
        };
        let name = node.name();
        let (p, missing) = patched(dag, id, k, &name, scopes, addrs, &state.values)?;
        if missing {
            return Err(Error::Invalid(format!(
                "kernel node `{name}` was lowered without the handle of a device node it passes \
                 (validation should have refused the DAG)"
            )));
        }
        backend.set_kernel_params(&name, h, &p)?;
    }
    Ok(())
}

/// Writes the handles lowering got (`(index, handle)`) into the arguments of the kernel nodes
/// that pass them: an [`Exec`](crate::Exec)'s copy of the DAG then holds what its graph has.
pub(crate) fn set_values(dag: &mut Dag, values: &[(u32, u64)]) {
    late::write_values(dag, |d| &mut d.device_nodes.late, values);
}

/// The DOT fill colour of a device-updatable kernel node (kernels are `#cfe2ff`).
pub(crate) const DOT_COLOR: &str = "#99e9f2";

/// The DOT words of a device-updatable kernel node (`device node #i`), if it is one.
pub(crate) fn label_words(dag: &Dag, id: NodeId) -> Option<String> {
    let i = dag.device_nodes.index_of(id)?;
    let updaters: Vec<String> = dag
        .device_nodes
        .late
        .args()
        .filter(|&(u, _, k)| k.index == i && dag.node(u).is_ok())
        .map(|(u, _, _)| dag.graph[u.idx].name().to_string())
        .collect();
    Some(if updaters.is_empty() {
        format!("device-updatable (device node #{i})")
    } else {
        format!(
            "device-updatable (device node #{i}), by {}",
            updaters.join(", ")
        )
    })
}
