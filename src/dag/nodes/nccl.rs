//! Collective nodes: one rank's part of an NCCL collective (all-reduce, all-gather,
//! reduce-scatter, broadcast, send/receive) as a node of that rank's DAG. NCCL has no graph-node
//! API, so lowering captures the call from a stream into the graph
//! ([`NodeParams::Captured`]); because a rank's capture may wait for the other ranks, DAGs
//! with collective nodes are instantiated together, one thread per rank, by
//! [`Communicators::instantiate`], after [`check_ranks`] (see [`crate::nccl`]).

use std::cell::Cell;
use std::sync::Arc;

use petgraph::graph::DiGraph;

use super::backend::CaptureWork;
use super::{Label, NodeOp};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, NodeKind, Op};
use crate::device::{DeviceKey, DeviceLimits};
use crate::error::{DagError, Error, Result};
use crate::fft::WorkShare;
use crate::memory::{Allocation, DeviceBuffer};
use crate::nccl::{Collective, Comm, Communicators, Kind, NcclType, ReduceOp};
use crate::sys;

/// One rank's part of a collective, in that rank's DAG.
#[derive(Clone)]
pub struct CollectiveNode {
    pub(crate) comm: Comm,
    pub(crate) coll: Collective,
}

impl std::fmt::Debug for CollectiveNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CollectiveNode({}, {:?})",
            self.coll.describe(),
            self.comm
        )
    }
}

impl CollectiveNode {
    /// The rank's communicator.
    pub fn comm(&self) -> &Comm {
        &self.comm
    }
    /// What the node does, in words (`all-reduce sum f32 x1024`, …).
    pub fn description(&self) -> String {
        self.coll.describe()
    }
}

fn collective_error(node: &str, problem: impl Into<String>) -> Error {
    Error::Dag(DagError::Collective {
        node: node.to_string(),
        problem: problem.into(),
    })
}

impl NodeOp for CollectiveNode {
    fn validate(&self, name: &str, _: &DeviceLimits, key: DeviceKey) -> Result<()> {
        if self.comm.key() != key {
            return Err(super::wrong_device(
                name,
                format!(
                    "the communicator's rank {} is on {}, but the graph is for {key}",
                    self.comm.rank,
                    self.comm.key()
                ),
            ));
        }
        self.coll.check_owners(name, key)
    }
    fn for_each_allocation(&self, f: &mut dyn FnMut(&Arc<Allocation>)) {
        self.coll.for_each_allocation(f)
    }
    fn label(&self) -> Label {
        Label::new(
            "hexagon",
            "#e0d4f5",
            vec![
                self.coll.describe(),
                format!("rank {} of {}", self.comm.rank, self.comm.ranks()),
            ],
        )
    }
    fn params<'a>(&'a self, _: Option<&'a WorkShare>) -> NodeParams<'a> {
        NodeParams::Captured(self)
    }
}

thread_local! {
    /// The (communicators, rank) whose DAG this thread is lowering inside
    /// [`Communicators::instantiate`].
    static LOWERING: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
}

/// Runs `f` as the lowering thread of `rank` of the communicators `clique`.
pub(crate) fn lowering_rank<R>(clique: u64, rank: usize, f: impl FnOnce() -> R) -> R {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            LOWERING.with(|c| c.set(None));
        }
    }
    LOWERING.with(|c| c.set(Some((clique, rank))));
    let _reset = Reset;
    f()
}

impl CaptureWork for CollectiveNode {
    unsafe fn enqueue(&self, stream: sys::cudaStream_t) -> Result<()> {
        // Only inside `Communicators::instantiate`, where every rank captures on its own thread
        // at the same time: a capture elsewhere could wait forever for the other ranks.
        let here = LOWERING.with(Cell::get);
        if here != Some((self.comm.clique.id, self.comm.rank)) {
            return Err(Error::Invalid(format!(
                "a collective node ({}, rank {} of {}) can only be lowered to CUDA by \
                 Communicators::instantiate, which captures every rank's DAG at once \
                 (Dag::instantiate, Dag::lower on a CudaBackend and Exec::update cannot)",
                self.coll.describe(),
                self.comm.rank,
                self.comm.ranks()
            )));
        }
        self.comm.with_raw(|comm| {
            // SAFETY: validated node: the buffers are device memory of the comm's device (the
            // lowering device) with lengths checked, kept alive by the DAG (and the Exec made
            // from it); the rank's lock is held; `stream` is live, of this device.
            unsafe { self.coll.issue(comm, stream) }
        })
    }
    fn describe(&self) -> String {
        format!(
            "nccl {} rank={}/{}",
            self.coll.describe(),
            self.comm.rank,
            self.comm.ranks()
        )
    }
}

impl Dag {
    fn add_collective(&mut self, comm: &Comm, made: Result<Collective, String>) -> Result<NodeId> {
        let name = self.next_default_name(NodeKind::Collective);
        let coll = made.map_err(|p| collective_error(&name, p))?;
        coll.check_owners(&name, comm.key())?;
        Ok(self.push(Op::Collective(CollectiveNode {
            comm: comm.clone(),
            coll,
        })))
    }

    /// Adds rank `comm.rank()`'s part of an all-reduce: `recv = op over ranks of send`
    /// (`ncclAllReduce`). `send` and `recv` have the same length and are device memory of the
    /// rank's device; passing one buffer twice reduces in place.
    pub fn add_all_reduce<T: NcclType>(
        &mut self,
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<NodeId> {
        let c = Collective::all_reduce(comm, send, recv, op);
        self.add_collective(comm, c)
    }

    /// Adds rank `comm.rank()`'s part of an all-gather (`ncclAllGather`): `recv` (`ranks` times
    /// the length of `send`, a distinct buffer) gets every rank's `send`, in rank order.
    pub fn add_all_gather<T: NcclType>(
        &mut self,
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
    ) -> Result<NodeId> {
        let c = Collective::all_gather(comm, send, recv);
        self.add_collective(comm, c)
    }

    /// Adds rank `comm.rank()`'s part of a reduce-scatter (`ncclReduceScatter`): `send` holds
    /// `ranks` blocks of `recv`'s length; `recv` (a distinct buffer) gets block `rank` of the
    /// reduction over ranks.
    pub fn add_reduce_scatter<T: NcclType>(
        &mut self,
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        op: ReduceOp,
    ) -> Result<NodeId> {
        let c = Collective::reduce_scatter(comm, send, recv, op);
        self.add_collective(comm, c)
    }

    /// Adds rank `comm.rank()`'s part of a broadcast (`ncclBroadcast`): every rank's `recv`
    /// gets rank `root`'s `send` (read on the root only; one buffer passed twice broadcasts in
    /// place).
    pub fn add_broadcast<T: NcclType>(
        &mut self,
        comm: &Comm,
        send: &DeviceBuffer<T>,
        recv: &DeviceBuffer<T>,
        root: usize,
    ) -> Result<NodeId> {
        let c = Collective::broadcast(comm, send, recv, root);
        self.add_collective(comm, c)
    }

    /// Adds a send of `buf` to rank `peer` (`ncclSend`); rank `peer`'s DAG needs the matching
    /// [`Dag::add_recv`] (same length and type). To exchange with a peer, or with the rank
    /// itself, use [`Dag::add_send_recv`].
    pub fn add_send<T: NcclType>(
        &mut self,
        comm: &Comm,
        buf: &DeviceBuffer<T>,
        peer: usize,
    ) -> Result<NodeId> {
        let c = Collective::p2p::<T>(comm, Some((buf, peer)), None);
        self.add_collective(comm, c)
    }

    /// Adds a receive into `buf` from rank `peer` (`ncclRecv`), matching that rank's
    /// [`Dag::add_send`].
    pub fn add_recv<T: NcclType>(
        &mut self,
        comm: &Comm,
        buf: &DeviceBuffer<T>,
        peer: usize,
    ) -> Result<NodeId> {
        let c = Collective::p2p::<T>(comm, None, Some((buf, peer)));
        self.add_collective(comm, c)
    }

    /// Adds a send of `send` to rank `to` and a receive into `recv` from rank `from`, in one
    /// NCCL group (so two ranks exchanging, or a ring shift, cannot wait on each other; `to`
    /// and `from` may be the rank itself, both or neither).
    pub fn add_send_recv<T: NcclType>(
        &mut self,
        comm: &Comm,
        send: &DeviceBuffer<T>,
        to: usize,
        recv: &DeviceBuffer<T>,
        from: usize,
    ) -> Result<NodeId> {
        let c = Collective::p2p(comm, Some((send, to)), Some((recv, from)));
        self.add_collective(comm, c)
    }
}

/// One rank's collective operations, in order: (node name, collective).
type RankOps<'a> = Vec<(String, &'a Collective)>;

/// Checks that the DAGs, one per rank of `comms` (`dags[r]` holds rank `r`'s collective
/// nodes), fit together, so that their graphs, launched once each, complete:
///
/// - every collective node of `dags[r]` is of rank `r` of `comms` (a DAG uses one
///   [`Communicators`]);
/// - in each DAG the collective nodes are ordered by its dependencies (a chain: NCCL runs one
///   communicator's operations one after the other, in the same order on every rank);
/// - the ranks' collectives (all-reduce, all-gather, reduce-scatter, broadcast) match in order:
///   same call, operator, type, count and root;
/// - every send from rank `a` to `b` is matched, in order, by a receive of `b` from `a` with
///   the same type and count;
/// - no rank waits for another in a cycle (matched operations taken as one step, each rank's
///   operations in order; a send and a receive in one [`Dag::add_send_recv`] node are one
///   step). The check is conservative: it may refuse an order NCCL would get through.
pub fn check_ranks(comms: &Communicators, dags: &[&Dag]) -> Result<()> {
    let n = comms.len();
    if dags.len() != n {
        return Err(Error::Invalid(format!(
            "{n} ranks, but {} DAGs were given (one per rank)",
            dags.len()
        )));
    }
    let mut ranks: Vec<RankOps> = Vec::with_capacity(n);
    for (r, dag) in dags.iter().enumerate() {
        let mut ops = Vec::new();
        let mut prev: Option<NodeId> = None;
        for id in dag.topological_order() {
            let node = &dag.graph[id.idx];
            let Op::Collective(c) = &node.op else {
                continue;
            };
            if !Arc::ptr_eq(&c.comm.clique, &comms.clique) {
                return Err(collective_error(
                    &node.name,
                    format!(
                        "uses other communicators than the ones instantiating rank {r}'s DAG \
                         (a DAG's collective nodes all use one Communicators)"
                    ),
                ));
            }
            if c.comm.rank != r {
                return Err(collective_error(
                    &node.name,
                    format!(
                        "is rank {}'s, but it is in the DAG given for rank {r}",
                        c.comm.rank
                    ),
                ));
            }
            if let Some(p) = prev {
                if dag.path(p.idx, id.idx).is_none() {
                    return Err(collective_error(
                        &node.name,
                        format!(
                            "is not ordered after collective node `{}` of the same \
                             communicator: add a dependency (NCCL runs a communicator's \
                             operations one at a time, in the same order on every rank)",
                            dag.graph[p.idx].name
                        ),
                    ));
                }
            }
            prev = Some(id);
            ops.push((node.name.clone(), &c.coll));
        }
        ranks.push(ops);
    }
    match_ranks(&ranks, "")
}

/// The check of [`check_ranks`] for one call per rank (the stream calls).
pub(crate) fn check_group(comms: &Communicators, parts: &[Collective], what: &str) -> Result<()> {
    let ranks: Vec<RankOps> = parts
        .iter()
        .enumerate()
        .map(|(r, c)| vec![(format!("{what} (rank {r})"), c)])
        .collect();
    debug_assert_eq!(ranks.len(), comms.len());
    match_ranks(&ranks, what)
}

/// Union-find over `(rank, index)` steps.
struct Steps {
    start: Vec<usize>,
    parent: Vec<usize>,
}

impl Steps {
    fn id(&self, rank: usize, i: usize) -> usize {
        self.start[rank] + i
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.parent[a] = b;
        }
    }
}

fn match_ranks(ranks: &[RankOps], what: &str) -> Result<()> {
    let n = ranks.len();
    let mut start = Vec::with_capacity(n);
    let mut total = 0;
    for ops in ranks {
        start.push(total);
        total += ops.len();
    }
    let mut steps = Steps {
        start,
        parent: (0..total).collect(),
    };
    let fail = |name: &str, problem: String| -> Error {
        if what.is_empty() {
            collective_error(name, problem)
        } else {
            Error::Invalid(format!("{name}: {problem}"))
        }
    };

    // Collectives: the k-th of every rank is the k-th of rank 0.
    let colls: Vec<Vec<(usize, &(String, &Collective))>> = ranks
        .iter()
        .map(|ops| {
            ops.iter()
                .enumerate()
                .filter(|(_, (_, c))| !matches!(c.kind, Kind::P2p { .. }))
                .collect()
        })
        .collect();
    for r in 1..n {
        for k in 0..colls[0].len().max(colls[r].len()) {
            let (a, b) = (colls[0].get(k), colls[r].get(k));
            match (a, b) {
                (Some((ia, (na, ca))), Some((ib, (nb, cb)))) => {
                    let same =
                        ca.kind == cb.kind && ca.dtype == cb.dtype && ca.count() == cb.count();
                    if !same {
                        return Err(fail(
                            nb,
                            format!(
                                "rank {r}'s collective #{k} ({}) does not match rank 0's \
                                 (`{na}`: {})",
                                cb.describe(),
                                ca.describe()
                            ),
                        ));
                    }
                    let (x, y) = (steps.id(0, *ia), steps.id(r, *ib));
                    steps.union(x, y);
                }
                (Some((_, (na, _))), None) => {
                    return Err(fail(
                        na,
                        format!("rank 0's collective #{k} has no counterpart on rank {r}"),
                    ))
                }
                (None, Some((_, (nb, _)))) => {
                    return Err(fail(
                        nb,
                        format!("rank {r}'s collective #{k} has no counterpart on rank 0"),
                    ))
                }
                (None, None) => {}
            }
        }
    }

    // Point to point: the j-th send a -> b pairs with the j-th receive of b from a.
    for a in 0..n {
        for b in 0..n {
            let sends: Vec<(usize, &(String, &Collective))> = ranks[a]
                .iter()
                .enumerate()
                .filter(|(_, (_, c))| matches!(c.kind, Kind::P2p { to: Some(t), .. } if t == b))
                .collect();
            let recvs: Vec<(usize, &(String, &Collective))> = ranks[b]
                .iter()
                .enumerate()
                .filter(|(_, (_, c))| matches!(c.kind, Kind::P2p { from: Some(f), .. } if f == a))
                .collect();
            for j in 0..sends.len().max(recvs.len()) {
                match (sends.get(j), recvs.get(j)) {
                    (Some((i, (ns, cs))), Some((k, (nr, cr)))) => {
                        let (sc, rc) = (send_count(cs), recv_count(cr));
                        if cs.dtype != cr.dtype || sc != rc {
                            return Err(fail(
                                nr,
                                format!(
                                    "receives {} x{rc} from rank {a}, but the matching send \
                                     (`{ns}`) sends {} x{sc}",
                                    cr.type_name, cs.type_name
                                ),
                            ));
                        }
                        let (x, y) = (steps.id(a, *i), steps.id(b, *k));
                        steps.union(x, y);
                    }
                    (Some((_, (ns, _))), None) => {
                        return Err(fail(
                            ns,
                            format!(
                                "send #{j} from rank {a} to rank {b} has no matching receive on \
                                 rank {b}"
                            ),
                        ))
                    }
                    (None, Some((_, (nr, _)))) => {
                        return Err(fail(
                            nr,
                            format!(
                                "receive #{j} of rank {b} from rank {a} has no matching send on \
                                 rank {a}"
                            ),
                        ))
                    }
                    (None, None) => {}
                }
            }
        }
    }

    // Each rank runs its steps in order; matched steps run together: the step graph must
    // have no cycle (a self-loop: two steps of one rank that must run together).
    let roots: Vec<usize> = (0..total).map(|x| steps.find(x)).collect();
    let mut g: DiGraph<(), ()> = DiGraph::new();
    let nodes: Vec<_> = (0..total).map(|_| g.add_node(())).collect();
    for (r, ops) in ranks.iter().enumerate() {
        for i in 1..ops.len() {
            let (x, y) = (roots[steps.id(r, i - 1)], roots[steps.id(r, i)]);
            if x == y {
                return Err(fail(
                    &ops[i].0,
                    format!(
                        "rank {r} would have to run it together with its earlier `{}` (their \
                         matching operations on other ranks are one step): combine them in one \
                         add_send_recv node",
                        ops[i - 1].0
                    ),
                ));
            }
            g.add_edge(nodes[x], nodes[y], ());
        }
    }
    if let Err(cycle) = petgraph::algo::toposort(&g, None) {
        let at = cycle.node_id().index();
        let (r, i) = (0..n)
            .rev()
            .find_map(|r| {
                let s = steps.start[r];
                (0..ranks[r].len())
                    .find(|&i| roots[s + i] == at)
                    .map(|i| (r, i))
            })
            .unwrap_or((0, 0));
        let name = ranks
            .get(r)
            .and_then(|o| o.get(i))
            .map_or("?", |o| o.0.as_str());
        return Err(fail(
            name,
            format!(
                "the ranks' collective nodes wait for each other in a cycle (through rank \
                 {r}'s `{name}`): reorder them, or pair sends and receives in add_send_recv nodes"
            ),
        ));
    }
    Ok(())
}

fn send_count(c: &Collective) -> usize {
    c.send.as_ref().map_or(0, |r| r.len / r.elem.max(1))
}

fn recv_count(c: &Collective) -> usize {
    c.recv.as_ref().map_or(0, |r| r.len / r.elem.max(1))
}
