//! Device-side graph launch: graphs instantiated for launch from the device
//! ([`InstantiateFlags::device_launch`](crate::InstantiateFlags::device_launch),
//! `cudaGraphInstantiateFlagDeviceLaunch`), handed over as a [`DeviceGraph`]
//! ([`Exec::into_device_graph`]: uploaded with `cudaGraphUpload`, then shared and immutable),
//! and the kernel nodes of other graphs that launch them (`cudaGraphLaunch` from device code,
//! fire-and-forget, tail or sibling launch), which take the graph as an argument and keep it
//! alive.
//!
//! CUDA's rules for a device graph (`cudaGraphInstantiateWithParams`, and the programming
//! guide's "Device Graph Launch": <https://docs.nvidia.com/cuda/cuda-programming-guide/>),
//! checked when the DAG is instantiated with `device_launch` ([`check_device_launch`], naming
//! the node, by path inside child graphs):
//! - only kernel, memcpy, memset and child-graph nodes, through child graphs too (no host,
//!   event, empty, memory, conditional, captured, FFT or collective node);
//! - at least one kernel, memcpy or memset node;
//! - every node on one device (no node placed on another);
//! - not together with `auto_free_on_launch` (CUDA refuses the pair; there are no memory nodes
//!   anyway).
//!
//! What the crate cannot see is left to CUDA, whose refusal names the node
//! ([`DagError::Instantiate`]): a kernel using dynamic parallelism, a cooperative kernel under
//! MPS.
//!
//! A [`DeviceGraph`] is neither updated nor launched from the host (CUDA: launching a device
//! graph from the host and the device at once, or from the device while it is updated, is
//! undefined behaviour), so [`Exec::into_device_graph`] consumes the `Exec`. A kernel node
//! passing one (its `cudaGraphExec_t`) keeps it in its DAG's [`DeviceGraphs`]; an `Exec` made
//! from that DAG keeps it until the `Exec` is dropped (after its launches), and counts the
//! device graph's buffers as its own (host access to them waits for its launches, which may
//! launch the device graph). Hence the crate's own rules: such kernels are nodes of the DAG
//! instantiated (not of a child graph or conditional body), on the device graph's device; an
//! `Exec` update cannot pass or replace the argument, and a whole-graph update of such a DAG is
//! refused ([`Exec::update_or_reinstantiate`](crate::Exec::update_or_reinstantiate)
//! instantiates again).

use std::sync::{Arc, Mutex};

use super::{wrong_device, ValidationTarget};
use crate::dag::exec::Exec;
use crate::dag::{Dag, NodeId, Op};
use crate::device::DeviceKey;
use crate::error::{DagError, Error, Result};
use crate::kernel::{DeviceGraph, DeviceGraphInner, KernelArg};
use crate::memory::Allocation;
use crate::stream::Stream;

/// The device graphs a DAG's kernel nodes pass (and keep alive): node, parameter, graph.
#[derive(Clone, Default)]
pub(crate) struct DeviceGraphs {
    uses: Vec<(NodeId, u32, DeviceGraph)>,
}

impl DeviceGraphs {
    /// Whether no kernel node passes a device graph (most DAGs: one test).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.uses.is_empty()
    }

    /// Notes which arguments of kernel node `id` pass a device graph (`args` are all its
    /// arguments, after they were accepted), replacing what was noted of it before.
    pub(crate) fn note_args(&mut self, id: NodeId, args: &[KernelArg<'_>]) {
        if self.uses.is_empty() && args.iter().all(|a| a.device_graph.is_none()) {
            return;
        }
        self.uses.retain(|(n, _, _)| *n != id);
        for (i, a) in args.iter().enumerate() {
            if let Some(g) = a.device_graph {
                self.uses.push((id, i as u32, g.clone()));
            }
        }
    }

    /// Why an [`Exec`] update of kernel node `id` with `args` (by parameter) is refused, if it
    /// is: a new argument is a device graph, or replaces one.
    pub(crate) fn exec_update_problem<'a>(
        &self,
        id: NodeId,
        mut args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
    ) -> Option<String> {
        args.find_map(|(i, a)| {
            if a.device_graph.is_some() {
                Some(format!(
                    "argument {i} is a device graph: an instantiated graph keeps the device \
                     graphs it was made with, whose buffers it counts as its own (update the DAG \
                     and instantiate it again)"
                ))
            } else if self
                .uses
                .iter()
                .any(|&(n, p, _)| n == id && p as usize == i)
            {
                Some(format!(
                    "argument {i} passes a device graph, which an update cannot replace"
                ))
            } else {
                None
            }
        })
    }

    /// The allocations of every device graph passed (an `Exec` holds them).
    pub(crate) fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        for (_, _, g) in &self.uses {
            g.inner.allocations.iter().for_each(&mut *f);
        }
    }

    /// The DOT words of kernel node `id`, if it passes a device graph.
    pub(crate) fn label_words(&self, id: NodeId) -> Option<String> {
        let (_, p, g) = self.uses.iter().find(|(n, _, _)| *n == id)?;
        Some(format!(
            "launches device graph {:#x} (argument {p})",
            g.raw()
        ))
    }
}

/// The DOT fill colour of a kernel node that launches a device graph.
pub(crate) const DOT_COLOR: &str = "#d0bfff";

impl Dag {
    /// The name of the first kernel node passing a device graph, if there is one.
    pub(crate) fn device_graph_user(&self) -> Option<String> {
        self.device_graphs
            .uses
            .iter()
            .find_map(|&(n, _, _)| self.node(n).ok())
            .map(|n| n.name().to_string())
    }
}

/// Validation of the kernel nodes passing device graphs (see the module's docs).
pub(crate) fn validate(dag: &Dag, target: &ValidationTarget<'_>) -> Result<()> {
    for (id, p, g) in &dag.device_graphs.uses {
        let Ok(node) = dag.node(*id) else { continue };
        if !target.placeable {
            return Err(Error::Dag(DagError::WrongKind {
                node: node.name().to_string(),
                problem: "passes a device graph, but it is inside a child graph or a conditional \
                          body: the kernels launching device graphs are nodes of the DAG that is \
                          instantiated (which keeps the graphs alive)"
                    .into(),
            }));
        }
        let key = node.device.unwrap_or(target.home);
        if g.device_key() != key {
            return Err(wrong_device(
                &node.name(),
                format!(
                    "argument {p} is a device graph of {}, but the node runs on {key}: a kernel \
                     launches graphs of its own device",
                    g.device_key()
                ),
            ));
        }
    }
    Ok(())
}

/// CUDA's rules for a graph instantiated for device launch (see the module's docs), for `dag`
/// lowered for `home`.
pub(crate) fn check_device_launch(dag: &Dag, home: DeviceKey) -> Result<()> {
    let mut work = false;
    check_kinds(dag, "", home, &mut work)?;
    if !work {
        return Err(Error::BadOptions {
            what: "InstantiateFlags::device_launch",
            problem: "the DAG has no kernel, memcpy or memset node, and CUDA instantiates for \
                      device launch only a graph with one"
                .into(),
        });
    }
    Ok(())
}

/// The node kinds and devices of `dag` (whose nodes are named `{path}name`); `work`: whether
/// there is a kernel, memcpy or memset node.
fn check_kinds(dag: &Dag, path: &str, home: DeviceKey, work: &mut bool) -> Result<()> {
    for n in dag.graph.node_weights() {
        let name = || format!("{path}{}", n.name());
        if let Some(k) = n.device.filter(|&k| k != home) {
            return Err(Error::Dag(DagError::Placement {
                node: name(),
                problem: format!(
                    "is placed on {k}, but the nodes of a graph instantiated for device launch \
                     all run on its device ({home})"
                ),
            }));
        }
        match &n.op {
            Op::Kernel(_) | Op::Memcpy(_) | Op::Memset(_) => *work = true,
            Op::Child(c) => check_kinds(c.dag(), &format!("{}/", name()), home, work)?,
            _ => {
                return Err(Error::Dag(DagError::WrongKind {
                    node: name(),
                    problem: format!(
                        "is a {} node, but a graph instantiated for device launch may hold only \
                         kernel, memcpy, memset and child-graph nodes (CUDA's rule, through \
                         child graphs too)",
                        n.kind().as_str()
                    ),
                }))
            }
        }
    }
    Ok(())
}

impl Exec {
    /// Hands this executable graph over for launches from the device: uploads it on `stream`
    /// (`cudaGraphUpload`, which CUDA needs before a device launch) and waits for the upload,
    /// then gives it as a [`DeviceGraph`], which kernel nodes of other DAGs take as an argument
    /// (`cudaGraphExec_t`) to launch it with `cudaGraphLaunch` from device code. The `Exec` is
    /// consumed: a device graph is neither updated nor launched from the host (CUDA leaves
    /// either, while the device may launch it, undefined).
    ///
    /// Refused unless the DAG was instantiated with
    /// [`InstantiateFlags::device_launch`](crate::InstantiateFlags::device_launch).
    pub fn into_device_graph(mut self, stream: &Stream) -> Result<DeviceGraph> {
        if !self.flags.device_launch {
            return Err(Error::BadOptions {
                what: "Exec::into_device_graph",
                problem: "the graph was not instantiated for device launch (set \
                          InstantiateFlags::device_launch)"
                    .into(),
            });
        }
        #[cfg(feature = "cudarc")]
        if let Some(a) = self.lent().next() {
            // A launch from the device cannot bind the cudarc slice (`Exec::launch_lent`).
            return Err(Error::Cudarc {
                what: "Exec::into_device_graph",
                problem: format!(
                    "the graph uses memory lent by cudarc (a Lent of {:#x}, {} bytes), which \
                     only host launches that bind its slice may use; take the slice into a \
                     DeviceBuffer (DeviceBuffer::from_cudarc) for a device-launched graph",
                    a.ptr, a.bytes
                ),
            });
        }
        // Host launches of this graph may still run (on any stream): CUDA leaves a device
        // launch beside them undefined, so they complete first.
        self.synchronize()?;
        self.upload(stream)?;
        stream.synchronize()?;
        let mut allocations: Vec<Arc<Allocation>> = Vec::new();
        let mut add = |a: &Arc<Allocation>| {
            if !allocations.iter().any(|b| Arc::ptr_eq(a, b)) {
                allocations.push(a.clone());
            }
        };
        self.dag.for_each_allocation(&mut add);
        self.dag.device_graphs.for_each_allocation(&mut add);
        Ok(DeviceGraph {
            inner: Arc::new(DeviceGraphInner {
                raw: self.raw as u64,
                device: self.device.key(),
                allocations,
                _exec: Box::new(Mutex::new(self)),
            }),
        })
    }
}
