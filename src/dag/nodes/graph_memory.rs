//! Graph memory nodes (`cudaGraphNodeTypeMemAlloc`, `cudaGraphNodeTypeMemFree`): device
//! memory a graph allocates and frees itself, named by a [`GraphBuffer`] whose lifetime is the
//! span between its allocation node and its free node.
//!
//! [`Dag::add_alloc`] adds an allocation node and hands out the buffer; [`Dag::add_free`]
//! frees it. Nodes ordered in between use it: kernel arguments (`KernelArg::from(&buffer)`)
//! and fills of the whole buffer ([`Dag::add_graph_memset`]). This first version has no copy
//! to or from a graph buffer (copy through a kernel, or into an ordinary buffer from a kernel).
//!
//! CUDA gives an allocation's address when its node is added to a graph
//! (`cudaGraphAddNode` returns it in `cudaMemAllocNodeParams::dptr`), "fixed across
//! instantiations and launches" of that graph
//! (<https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__GRAPH.html>,
//! `cudaGraphAddMemAllocNode`). So the DAG holds placeholders, and lowering writes the address
//! into a copy of each node that uses the buffer and into the free node, as it writes
//! conditional handles; an [`Exec`](crate::Exec)'s copy of the DAG holds its graph's
//! addresses, so per-node updates of the other arguments (or of a fill's value) pass them on.
//!
//! CUDA's rules, and this crate's, checked by validation with a
//! [`DagError::GraphMemory`] naming the node:
//! - "the allocation can be accessed by nodes ordered after the allocation node but before the
//!   free node", and "can only be freed once in the owning graph" (same page): every node
//!   using a buffer is ordered after its allocation node and, when the DAG frees it, before
//!   its free node (a node merely not ordered after the free could still run after it); a
//!   free node is ordered after the allocation; one free node per buffer; a free needs the
//!   allocation node of its DAG;
//! - a buffer is used only by nodes of the DAG that allocated it (a copy of that DAG counts as
//!   that DAG: it allocates its own memory when lowered), not by another DAG, a child graph or
//!   a conditional body, and those hold no memory nodes either (a conditional body's "allowed
//!   node types are kernel nodes, empty nodes, child graphs, memsets, memcopies, and
//!   conditionals", `cudaConditionalNodeParams`; a child graph holding memory nodes must be
//!   moved into its parent, which the crate's child nodes, cloned, are not);
//! - memory nodes run on the graph's device (they cannot be placed), and so does every node
//!   using a graph buffer: the allocation is made without peer access descriptors;
//! - "there can be at most one executable graph in existence" for a graph holding memory
//!   nodes (`cudaGraphInstantiate`): each [`Exec`](crate::Exec) lowers its DAG into a graph of
//!   its own, so this always holds;
//! - an allocation the graph does not free stays allocated after a launch, and relaunching the
//!   graph fails unless it was instantiated with
//!   [`InstantiateFlags::auto_free_on_launch`](crate::InstantiateFlags::auto_free_on_launch)
//!   (`cudaGraphInstantiateFlagAutoFreeOnLaunch`: such memory is freed before the next
//!   launch). Instantiation refuses an allocation without a free node unless that flag is set;
//!   with it, the [`Exec`](crate::Exec) frees what its last launch left when it is dropped
//!   (`cudaFree`, after waiting for its launches). The memory is never reachable outside the
//!   graph.
//!
//! On an [`Exec`](crate::Exec): memory nodes have no per-node update, and a whole-graph update
//! of a graph with memory nodes is refused (the update's graph would hold allocations at other
//! addresses than the executable graph's): [`Exec::update_or_reinstantiate`](crate::Exec::update_or_reinstantiate)
//! instantiates again, with the same flags. A kernel argument passing a graph buffer keeps it:
//! an update giving a kernel node a graph buffer, or replacing the argument that passes one, is
//! refused.

use petgraph::algo::{has_path_connecting, DfsSpace};
use petgraph::visit::EdgeRef;

use super::memset::{FillTarget, MemsetNode, MemsetValue};
use super::{Label, NodeOp, ValidationTarget};
use crate::dag::nodes::backend::{Backend, NodeParams};
use crate::dag::nodes::late::{self, LateKey, LateValues, Slot, UpdateProblem};
use crate::dag::{Dag, NodeId, NodeKind, NodeName, Op};
use crate::error::{DagError, Error, Result};
use crate::graph_buffer::{GraphBuffer, GraphBufferKey};
use crate::kernel::KernelArg;
use crate::memory::DeviceRepr;
use crate::sys;

/// An allocation node ([`Dag::add_alloc`]): the buffer it allocates and its size.
#[derive(Clone, Debug)]
pub struct MemAllocNode {
    key: GraphBufferKey,
    bytes: usize,
    len: usize,
    elem: &'static str,
}

impl MemAllocNode {
    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// The buffer's number among its DAG's graph allocations ([`GraphBuffer::index`]).
    pub fn index(&self) -> u32 {
        self.key.index
    }
}

/// A free node ([`Dag::add_free`]): the buffer it frees.
#[derive(Clone, Debug)]
pub struct MemFreeNode {
    key: GraphBufferKey,
}

impl MemFreeNode {
    /// The number of the buffer it frees ([`GraphBuffer::index`]).
    pub fn index(&self) -> u32 {
        self.key.index
    }
}

/// A DAG's graph memory: the allocations it made and the nodes that use a graph buffer (of
/// this DAG or, wrongly, of another, which validation refuses).
#[derive(Clone, Default)]
pub(crate) struct GraphMemory {
    /// The allocation node of each buffer, by index.
    allocs: Vec<NodeId>,
    /// The scope of the allocations, and the nodes using a graph buffer (late values:
    /// `nodes/late.rs`): a kernel node's argument ([`Slot::Arg`]) or a fill ([`Slot::Fill`]).
    late: LateValues<GraphBufferKey>,
}

impl LateKey for GraphBufferKey {
    fn scope(&self) -> u64 {
        self.scope
    }
    fn index(&self) -> u32 {
        self.index
    }
}

impl GraphMemory {
    /// Whether the DAG has nothing to do with graph memory (most DAGs: one test).
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.allocs.is_empty() && self.late.is_empty()
    }

    /// Whether some node uses a graph buffer.
    #[inline]
    pub(crate) fn has_uses(&self) -> bool {
        !self.late.is_empty()
    }

    /// How many allocations the DAG made.
    pub(crate) fn alloc_count(&self) -> usize {
        self.allocs.len()
    }

    /// Notes which arguments of kernel node `id` pass a graph buffer (`args` are all its
    /// arguments, after they were accepted).
    pub(crate) fn note_args(&mut self, id: NodeId, args: &[KernelArg<'_>]) {
        self.late.note_args(id, args, |a| a.graph_buffer);
    }

    /// Whether kernel node `id` passes a graph buffer.
    pub(crate) fn kernel_uses(&self, id: NodeId) -> bool {
        self.late.kernel_uses(id)
    }

    /// Why an [`Exec`](crate::Exec) update of kernel node `id` with `args` (by parameter) is
    /// refused, if it is: a new argument is a graph buffer, or replaces one.
    pub(crate) fn exec_update_problem<'a>(
        &self,
        id: NodeId,
        args: impl Iterator<Item = (usize, &'a KernelArg<'a>)>,
    ) -> Option<String> {
        let problem = self
            .late
            .update_problem(id, args, |a| a.graph_buffer.is_some())?;
        Some(match problem {
            UpdateProblem::Passes(i) => format!(
                "argument {i} is a graph-allocated buffer: an instantiated graph's kernel \
                 nodes keep the graph buffers they were lowered with (update the DAG and \
                 instantiate it again)"
            ),
            UpdateProblem::Replaces(i) => format!(
                "argument {i} passes a graph-allocated buffer, which an update cannot \
                 replace (update the node's other arguments with Exec::set_kernel_arg)"
            ),
        })
    }
}

/// A [`DagError::GraphMemory`] naming `node`.
fn error(node: impl std::fmt::Display, problem: String) -> Error {
    Error::Dag(DagError::GraphMemory {
        node: node.to_string(),
        problem,
    })
}

impl Dag {
    /// Adds a graph allocation node: `len` elements of `T` of the graph's device, allocated
    /// when a launch reaches the node (`cudaGraphNodeTypeMemAlloc`) from CUDA's graph memory
    /// pool. Returns the node and the [`GraphBuffer`] it allocates, which nodes ordered after
    /// it (and before its free, [`Dag::add_free`]) use. Its contents are undefined until a
    /// node writes them. Refuses an empty buffer.
    pub fn add_alloc<T: DeviceRepr>(&mut self, len: usize) -> Result<(NodeId, GraphBuffer<T>)> {
        let name = || self.next_default_name(NodeKind::MemAlloc);
        let bytes = len.checked_mul(std::mem::size_of::<T>());
        let bytes = match bytes {
            Some(b) if b > 0 => b,
            Some(_) => {
                return Err(error(
                    name(),
                    "allocates 0 bytes: a graph allocation has at least one byte".into(),
                ))
            }
            None => {
                return Err(error(
                    name(),
                    format!(
                        "{len} elements of {} bytes overflow",
                        std::mem::size_of::<T>()
                    ),
                ))
            }
        };
        let Ok(index) = u32::try_from(self.graph_memory.allocs.len()) else {
            return Err(error(name(), "a DAG has at most 2^32 allocations".into()));
        };
        let m = &mut self.graph_memory;
        let key = GraphBufferKey {
            scope: m.late.declare(),
            index,
        };
        let id = self.push(Op::MemAlloc(MemAllocNode {
            key,
            bytes,
            len,
            elem: std::any::type_name::<T>(),
        }));
        self.graph_memory.allocs.push(id);
        Ok((id, GraphBuffer::new(key, len)))
    }

    /// Adds a node that frees `buffer` (`cudaGraphNodeTypeMemFree`); order it after every node
    /// that uses the buffer (validation checks). A buffer is freed at most once, by the DAG
    /// that allocated it. A buffer the DAG does not free needs
    /// [`InstantiateFlags::auto_free_on_launch`](crate::InstantiateFlags::auto_free_on_launch).
    pub fn add_free<T: DeviceRepr>(&mut self, buffer: &GraphBuffer<T>) -> Result<NodeId> {
        let name = self.next_default_name(NodeKind::MemFree);
        self.check_own(&name, buffer.key, "frees")?;
        let alloc = self.graph_memory.allocs[buffer.key.index as usize];
        if self.node(alloc).is_err() {
            return Err(error(
                name,
                format!(
                    "frees graph buffer #{}, whose allocation node was removed: a free needs \
                     its allocation",
                    buffer.key.index
                ),
            ));
        }
        if let Some(other) = self.free_node_of(buffer.key) {
            return Err(error(
                name,
                format!(
                    "frees graph buffer #{}, which `{}` frees already: CUDA frees a graph \
                     allocation once",
                    buffer.key.index,
                    self.graph[other.idx].name()
                ),
            ));
        }
        Ok(self.push(Op::MemFree(MemFreeNode { key: buffer.key })))
    }

    /// Adds a fill of all of graph buffer `dst` with `value`, repeated (a 1D memset node whose
    /// address lowering writes). Order it between the buffer's allocation and free.
    pub fn add_graph_memset<T: DeviceRepr>(
        &mut self,
        dst: &GraphBuffer<T>,
        value: impl Into<MemsetValue>,
    ) -> Result<NodeId> {
        let value = value.into();
        let name = self.next_default_name(NodeKind::Memset);
        self.check_own(&name, dst.key, "fills")?;
        let bytes = dst.size_bytes();
        if !bytes.is_multiple_of(value.size()) {
            return Err(super::out_of_bounds(
                &name,
                format!(
                    "{bytes} bytes is not a whole number of {}-byte values",
                    value.size()
                ),
            ));
        }
        let id = self.push(Op::Memset(MemsetNode {
            dst: FillTarget::Graph {
                key: dst.key,
                addr: 0,
            },
            value,
            width: bytes / value.size(),
            height: 1,
            pitch: bytes,
        }));
        self.graph_memory.late.push(id, Slot::Fill, dst.key);
        Ok(id)
    }

    /// The name of the DAG's first memory node, if it has one (a whole-graph update of such a
    /// graph is refused).
    pub(crate) fn graph_memory_node(&self) -> Option<String> {
        if self.graph_memory.allocs.is_empty() {
            return None;
        }
        self.graph
            .node_weights()
            .find(|n| matches!(n.op, Op::MemAlloc(_) | Op::MemFree(_)))
            .map(|n| n.name().to_string())
    }

    /// An error unless `key` is a buffer this DAG allocated.
    fn check_own(&self, name: &str, key: GraphBufferKey, verb: &str) -> Result<()> {
        let m = &self.graph_memory;
        if key.scope == m.late.scope() && (key.index as usize) < m.allocs.len() {
            return Ok(());
        }
        Err(error(
            name,
            format!(
                "{verb} graph buffer #{} of another DAG: a graph buffer is used only by the \
                 DAG that allocates it",
                key.index
            ),
        ))
    }

    /// The free node of buffer `key`, if the DAG has one.
    fn free_node_of(&self, key: GraphBufferKey) -> Option<NodeId> {
        self.graph
            .node_indices()
            .find(|&i| matches!(&self.graph[i].op, Op::MemFree(f) if f.key == key))
            .map(|i| self.id_at(i))
    }
}

impl NodeOp for MemAllocNode {
    fn label(&self) -> Label {
        let elem = self.elem.rsplit("::").next().unwrap_or(self.elem);
        Label::new(
            "invtrapezium",
            "#c5f6fa",
            vec![format!(
                "alloc {} (graph buffer #{}: {} × {elem})",
                super::byte_count(self.bytes),
                self.key.index,
                self.len
            )],
        )
    }
    fn params(&self) -> NodeParams<'_> {
        unreachable!("allocation nodes are lowered by graph_memory::lower_node")
    }
}

impl NodeOp for MemFreeNode {
    fn label(&self) -> Label {
        Label::new(
            "trapezium",
            "#c5f6fa",
            vec![format!("free graph buffer #{}", self.key.index)],
        )
    }
    fn params(&self) -> NodeParams<'_> {
        unreachable!("free nodes are lowered by graph_memory::lower_node")
    }
}

/// Validation of a DAG that allocates or uses graph memory (see the module's rules).
pub(crate) fn validate(dag: &Dag, target: &ValidationTarget<'_>) -> Result<()> {
    let m = &dag.graph_memory;
    let name = |id: NodeId| dag.graph[id.idx].name().to_string();
    if !target.placeable {
        let first = dag
            .graph
            .node_indices()
            .find(|&i| matches!(dag.graph[i].op, Op::MemAlloc(_) | Op::MemFree(_)))
            .map(|i| dag.id_at(i))
            .or_else(|| m.late.iter().map(|u| u.0).find(|&id| dag.node(id).is_ok()));
        if let Some(id) = first {
            return Err(error(
                name(id),
                "is a graph memory node or uses a graph buffer, but it is inside a child graph \
                 or a conditional body: CUDA allows memory nodes in neither, and graph buffers \
                 are used by nodes of the DAG that allocates them"
                    .into(),
            ));
        }
        return Ok(());
    }
    let mut space = DfsSpace::new(&dag.graph);
    let mut path = |from: NodeId, to: NodeId| {
        has_path_connecting(&dag.graph, from.idx, to.idx, Some(&mut space))
    };
    // Whether `user` completes before `free` starts: a path whose first edge is a full
    // dependency. After a programmatic edge the next kernel may run while `user` still does
    // (unless its code waits with `cudaGridDependencySynchronize`, which the crate cannot
    // see), so such a path orders only the starts; every later node of the path has started
    // before `free` starts, the first one after `user` completed.
    let mut space2 = DfsSpace::new(&dag.graph);
    let mut completes_before = |user: NodeId, free: NodeId| {
        dag.graph.edges(user.idx).any(|e| {
            e.weight().programmatic().is_none()
                && (e.target() == free.idx
                    || has_path_connecting(&dag.graph, e.target(), free.idx, Some(&mut space2)))
        })
    };
    // The free node of each allocation.
    let mut frees: Vec<Option<NodeId>> = vec![None; m.allocs.len()];
    for i in dag.graph.node_indices() {
        let Op::MemFree(f) = &dag.graph[i].op else {
            continue;
        };
        let id = dag.id_at(i);
        let k = f.key;
        let alloc = m.allocs.get(k.index as usize).copied();
        let problem = match alloc {
            _ if k.scope != m.late.scope() => format!(
                "frees graph buffer #{} of another DAG: a graph buffer is freed by the DAG that \
                 allocates it",
                k.index
            ),
            Some(a) if dag.node(a).is_ok() => match frees[k.index as usize] {
                Some(other) => format!(
                    "frees graph buffer #{}, which `{}` frees too: CUDA frees a graph allocation \
                     once",
                    k.index,
                    name(other)
                ),
                None if !path(a, id) => format!(
                    "frees graph buffer #{} but is not ordered after its allocation `{}` (add a \
                     dependency from it)",
                    k.index,
                    name(a)
                ),
                None => {
                    frees[k.index as usize] = Some(id);
                    continue;
                }
            },
            _ => format!(
                "frees graph buffer #{}, whose allocation node was removed: a free needs its \
                 allocation",
                k.index
            ),
        };
        return Err(error(name(id), problem));
    }
    let home = target.home;
    for &(id, how, k) in m.late.iter() {
        let Ok(node) = dag.node(id) else { continue };
        let used = match (how, &node.op) {
            (Slot::Arg(p), Op::Kernel(_)) => format!("argument {p} passes"),
            (Slot::Fill, Op::Memset(_)) => "fills".to_string(),
            _ => continue,
        };
        let alloc = m.allocs.get(k.index as usize).copied();
        let problem = match alloc {
            _ if k.scope != m.late.scope() => format!(
                "{used} graph buffer #{} of another DAG: a graph buffer is used only by the DAG \
                 that allocates it (not by another DAG, a child graph or a conditional body)",
                k.index
            ),
            Some(a) if dag.node(a).is_ok() => {
                let free = frees[k.index as usize];
                if let Some(d) = node.device.filter(|&d| d != home) {
                    format!(
                        "{used} graph buffer #{}, but the node is placed on {d}: graph memory is \
                         allocated on the graph's device ({home}), without peer access",
                        k.index
                    )
                } else if !path(a, id) {
                    format!(
                        "{used} graph buffer #{} but is not ordered after its allocation `{}`: \
                         the memory may not exist yet (add a dependency from the allocation)",
                        k.index,
                        name(a)
                    )
                } else if let Some(f) = free.filter(|&f| path(f, id)) {
                    format!(
                        "{used} graph buffer #{} after its free `{}`: the memory is gone",
                        k.index,
                        name(f)
                    )
                } else if let Some(f) = free.filter(|&f| !path(id, f)) {
                    format!(
                        "{used} graph buffer #{} but is not ordered before its free `{}`: it \
                         could run after the memory is freed (add a dependency to the free)",
                        k.index,
                        name(f)
                    )
                } else if let Some(f) = free.filter(|&f| !completes_before(id, f)) {
                    format!(
                        "{used} graph buffer #{} but reaches its free `{}` only through a \
                         programmatic edge out of it: the free could run while it still does \
                         (add a full dependency from it towards the free)",
                        k.index,
                        name(f)
                    )
                } else {
                    continue;
                }
            }
            _ => format!(
                "{used} graph buffer #{}, whose allocation node was removed",
                k.index
            ),
        };
        return Err(error(name(id), problem));
    }
    Ok(())
}

/// The allocations `dag` does not free (by index, with their allocation nodes).
pub(crate) fn unfreed(dag: &Dag) -> Vec<(u32, NodeId)> {
    let m = &dag.graph_memory;
    let mut freed = vec![false; m.allocs.len()];
    for n in dag.graph.node_weights() {
        if let Op::MemFree(f) = &n.op {
            if f.key.scope == m.late.scope() {
                if let Some(x) = freed.get_mut(f.key.index as usize) {
                    *x = true;
                }
            }
        }
    }
    m.allocs
        .iter()
        .enumerate()
        .filter(|&(i, &a)| !freed[i] && dag.node(a).is_ok())
        .map(|(i, &a)| (i as u32, a))
        .collect()
}

/// Refuses a DAG with an allocation it does not free, unless the graph is instantiated with
/// `auto_free_on_launch` (a second launch would fail: CUDA refuses to allocate again).
pub(crate) fn check_unfreed(dag: &Dag, auto_free_on_launch: bool) -> Result<()> {
    if auto_free_on_launch || dag.graph_memory.allocs.is_empty() {
        return Ok(());
    }
    match unfreed(dag).first() {
        None => Ok(()),
        Some(&(index, a)) => Err(error(
            dag.graph[a.idx].name(),
            format!(
                "allocates graph buffer #{index}, which no node frees: the memory would outlive \
                 the launch and the next launch would fail (add a free node with Dag::add_free, \
                 or instantiate with InstantiateFlags::auto_free_on_launch)"
            ),
        )),
    }
}

/// Adds node `id` (`op`) of `dag` when it is a memory node or a fill of a graph buffer:
/// allocation nodes write their address into `addrs`, the others read it. `None`: another
/// kind of node.
pub(crate) fn lower_node<B: Backend>(
    op: &Op,
    name: &NodeName<'_>,
    deps: &[B::Node],
    backend: &mut B,
    addrs: &mut [u64],
) -> Result<Option<B::Node>> {
    let node = match op {
        Op::MemAlloc(a) => {
            let dptr = std::cell::Cell::new(0);
            let params = NodeParams::MemAlloc {
                index: a.key.index,
                bytes: a.bytes,
                dptr: &dptr,
            };
            let h = backend.add_node(name, deps, &[], params)?;
            addrs[a.key.index as usize] = dptr.get();
            h
        }
        Op::MemFree(f) => {
            let mut raw = NodeParams::zeroed(sys::cudaGraphNodeType::cudaGraphNodeTypeMemFree);
            raw.__bindgen_anon_1.free = sys::cudaMemFreeNodeParams {
                dptr: address(addrs, f.key, name)? as *mut std::ffi::c_void,
            };
            backend.add_node(name, deps, &[], NodeParams::Generic(raw))?
        }
        Op::Memset(m) => {
            let FillTarget::Graph { key, .. } = m.dst else {
                return Ok(None);
            };
            let mut patched = m.clone();
            patched.dst = FillTarget::Graph {
                key,
                addr: address(addrs, key, name)?,
            };
            backend.add_node(name, deps, &[], NodeParams::Generic(patched.generic()))?
        }
        _ => return Ok(None),
    };
    Ok(Some(node))
}

/// The address lowering got for buffer `key` (validation ordered its allocation first).
fn address(addrs: &[u64], key: GraphBufferKey, name: &NodeName<'_>) -> Result<u64> {
    match addrs.get(key.index as usize) {
        Some(&a) if a != 0 => Ok(a),
        _ => Err(Error::Invalid(format!(
            "node `{name}` was lowered before the allocation of graph buffer #{} (validation \
             should have refused the DAG)",
            key.index
        ))),
    }
}

/// Writes the addresses of the graph buffers kernel node `id` of `dag` passes into `k` (a
/// copy of the node's arguments being lowered).
pub(crate) fn patch_kernel(
    dag: &Dag,
    id: NodeId,
    k: &mut super::KernelNode,
    name: &NodeName<'_>,
    addrs: &[u64],
) -> Result<()> {
    dag.graph_memory
        .late
        .patch_kernel(id, k, |key| address(addrs, key, name))
}

/// Writes the addresses lowering got for `dag`'s allocations (`(index, address)`) into the
/// nodes that use them: an [`Exec`](crate::Exec)'s copy of the DAG then holds what its graph
/// has, and per-node updates of the other arguments (or of a fill's value) pass them on.
pub(crate) fn set_addresses(dag: &mut Dag, values: &[(u32, u64)]) {
    late::write_values(dag, |d| &mut d.graph_memory.late, values);
}

/// The DOT lines of allocation node `id`: the span it allocates (its free node, the nodes
/// using the buffer), and the free node's id for a dotted span edge.
pub(crate) fn span_words(dag: &Dag, id: NodeId) -> (Vec<String>, Option<NodeId>) {
    let Op::MemAlloc(a) = &dag.graph[id.idx].op else {
        return (Vec::new(), None);
    };
    let free = dag.free_node_of(a.key);
    let users: Vec<String> = dag
        .graph_memory
        .late
        .iter()
        .filter(|(n, _, k)| *k == a.key && dag.node(*n).is_ok())
        .map(|(n, _, _)| dag.graph[n.idx].name().to_string())
        .fold(Vec::new(), |mut v, n| {
            if !v.contains(&n) {
                v.push(n);
            }
            v
        });
    let mut lines = vec![match free {
        Some(f) => format!("live until {}", dag.graph[f.idx].name()),
        None => "never freed in the graph".to_string(),
    }];
    if !users.is_empty() {
        lines.push(format!("used by {}", users.join(", ")));
    }
    (lines, free)
}
