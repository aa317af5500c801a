//! Collective nodes: one rank's part of an NCCL collective (all-reduce, all-gather,
//! reduce-scatter, broadcast, send/receive) as a node of that rank's DAG. NCCL has no graph-node
//! API, so lowering captures the call from a stream into the graph
//! ([`NodeParams::Captured`]); because a rank's capture may wait for the other ranks, DAGs
//! with collective nodes are instantiated together, one thread per rank, by
//! [`Communicators::instantiate`], after [`check_ranks`] (see [`crate::nccl`]).

use std::cell::Cell;
use std::sync::Arc;

use super::backend::CaptureWork;
use super::{Label, NodeOp};
use crate::dag::nodes::backend::NodeParams;
use crate::dag::{Dag, NodeId, NodeKind, NodeName, Op};
use crate::error::{Error, Result};
use crate::memory::{Allocation, DeviceBuffer};
use crate::nccl::{
    collective_error, for_each_collective, match_ranks, Collective, Comm, Communicators, Kind,
    NcclType, OwnerCheck, RankOps,
};
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

impl NodeOp for CollectiveNode {
    fn validate(&self, name: &NodeName<'_>, on: &super::RunsOn<'_>) -> Result<()> {
        let key = on.key;
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
        self.coll.check_owners(OwnerCheck::Node(name), key)
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
    fn params(&self) -> NodeParams<'_> {
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
            return Err(Error::CollectiveOutsideInstantiate {
                collective: format!(
                    "{}, rank {} of {}",
                    self.coll.describe(),
                    self.comm.rank,
                    self.comm.ranks()
                ),
            });
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
        coll.check_owners(OwnerCheck::Node(&name), comm.key())?;
        Ok(self.push(Op::Collective(Box::new(CollectiveNode {
            comm: comm.clone(),
            coll,
        }))))
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

/// The builder calls of the collectives' table ([`for_each_collective!`]): one method per
/// row, `name(&mut self, comm, send, recv, <the row's fields>)`.
macro_rules! dag_calls {
    ($(
        $(#[$sdoc:meta])* stream $stream:ident;
        $(#[$ddoc:meta])* dag $dag:ident;
        kind $kind:ident { $($field:ident: $ty:ty),* } $rank:tt
    )*) => {
        impl Dag {$(
            $(#[$ddoc])*
            pub fn $dag<T: NcclType>(
                &mut self,
                comm: &Comm,
                send: &DeviceBuffer<T>,
                recv: &DeviceBuffer<T>,
                $($field: $ty,)*
            ) -> Result<NodeId> {
                let c = Collective::make(comm, Kind::$kind { $($field),* }, send, recv);
                self.add_collective(comm, c)
            }
        )*}
    };
}
for_each_collective!(dag_calls);

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
pub(crate) fn check_ranks(comms: &Communicators, dags: &[&Dag]) -> Result<()> {
    let n = comms.len();
    if dags.len() != n {
        return Err(Error::RankMismatch {
            call: "Communicators::check_ranks",
            problem: format!(
                "{n} ranks, but {} DAGs were given (one per rank)",
                dags.len()
            ),
        });
    }
    let mut ranks: Vec<RankOps> = Vec::with_capacity(n);
    for (r, dag) in dags.iter().enumerate() {
        let mut ops = Vec::new();
        let mut prev: Option<NodeId> = None;
        for id in dag.topological_order() {
            let node = &dag.graph[id.idx];
            if let Op::Child(child) = &node.op {
                if let Some(inner) = first_collective(&child.dag) {
                    return Err(collective_error(
                        &node.name(),
                        format!(
                            "its child DAG has collective node `{inner}`: collective nodes must \
                             be in the rank's top-level DAG, where their order is checked"
                        ),
                    ));
                }
            }
            let Op::Collective(c) = &node.op else {
                continue;
            };
            if !Arc::ptr_eq(&c.comm.clique, &comms.clique) {
                return Err(collective_error(
                    &node.name(),
                    format!(
                        "uses other communicators than the ones instantiating rank {r}'s DAG \
                         (a DAG's collective nodes all use one Communicators)"
                    ),
                ));
            }
            if c.comm.rank != r {
                return Err(collective_error(
                    &node.name(),
                    format!(
                        "is rank {}'s, but it is in the DAG given for rank {r}",
                        c.comm.rank
                    ),
                ));
            }
            if let Some(p) = prev {
                if dag.path(p.idx, id.idx).is_none() {
                    return Err(collective_error(
                        &node.name(),
                        format!(
                            "is not ordered after collective node `{}` of the same \
                             communicator: add a dependency (NCCL runs a communicator's \
                             operations one at a time, in the same order on every rank)",
                            dag.graph[p.idx].name()
                        ),
                    ));
                }
            }
            prev = Some(id);
            ops.push((node.name().to_string(), &c.coll));
        }
        ranks.push(ops);
    }
    match_ranks(&ranks, "")
}

/// The name of a collective node in `dag` or its child DAGs, if there is one.
fn first_collective(dag: &Dag) -> Option<String> {
    dag.graph.node_weights().find_map(|n| match &n.op {
        Op::Collective(_) => Some(n.name().to_string()),
        Op::Child(c) => first_collective(&c.dag),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Region;
    use crate::nccl::ReduceOp;
    use crate::{DagError, DeviceLimits, RecordingBackend};

    fn two_ranks() -> (Vec<RecordingBackend>, Communicators) {
        let recs = vec![
            RecordingBackend::new(DeviceLimits::hopper()),
            RecordingBackend::new(DeviceLimits::hopper()),
        ];
        let comms = Communicators::recording(&[&recs[0], &recs[1]]);
        (recs, comms)
    }

    fn problem(e: Error) -> (String, String) {
        match e {
            Error::Dag(DagError::Collective { node, problem }) => (node, problem),
            Error::WrongDevice {
                node: Some(node),
                problem,
            } => (node, problem),
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn builder_checks_lengths_and_peers_naming_the_node() {
        let (mut recs, comms) = two_ranks();
        let c0 = comms.comm(0).unwrap();
        let a = recs[0].device_buffer::<f32>(1024);
        let b = recs[0].device_buffer::<f32>(1000);
        let g = recs[0].device_buffer::<f32>(2048);
        let mut dag = Dag::new();
        dag.add_empty();
        let (node, p) = problem(dag.add_all_reduce(&c0, &a, &b, ReduceOp::Sum).unwrap_err());
        assert_eq!(node, "collective#1");
        assert!(p.contains("1024") && p.contains("1000"), "{p}");
        let (_, p) = problem(dag.add_all_gather(&c0, &a, &b).unwrap_err());
        assert!(p.contains("2 ranks") && p.contains("2048"), "{p}");
        dag.add_all_gather(&c0, &a, &g).unwrap();
        let (_, p) = problem(
            dag.add_reduce_scatter(&c0, &a, &a, ReduceOp::Max)
                .unwrap_err(),
        );
        assert!(p.contains("2 x the receive length"), "{p}");
        let (_, p) = problem(dag.add_broadcast(&c0, &a, &a, 2).unwrap_err());
        assert!(p.contains("root 2"), "{p}");
        let (_, p) = problem(dag.add_send(&c0, &a, 5).unwrap_err());
        assert!(p.contains("rank 5"), "{p}");
        let (_, p) = problem(dag.add_send(&c0, &a, 0).unwrap_err());
        assert!(p.contains("add_send_recv"), "{p}");
        let (_, p) = problem(dag.add_send_recv(&c0, &a, 0, &b, 0).unwrap_err());
        assert!(p.contains("1024") && p.contains("1000"), "{p}");
        dag.add_send_recv(&c0, &a, 0, &g, 0).unwrap_err();
        dag.add_all_reduce(&c0, &a, &a, ReduceOp::Sum).unwrap(); // in place
                                                                 // In place through another handle of the same memory; a send and a receive of one
                                                                 // memory refused.
        let in_place = dag.to_dot().matches("in place").count();
        dag.add_all_reduce(&c0, &a, &a.view_as::<f32>(), ReduceOp::Sum)
            .unwrap();
        assert_eq!(dag.to_dot().matches("in place").count(), in_place + 1);
        let half = recs[0].device_buffer::<f32>(1024);
        let (_, p) = problem(
            dag.add_send_recv(&c0, &half, 1, &half.view_as::<f32>(), 1)
                .unwrap_err(),
        );
        assert!(p.contains("must not overlap"), "{p}");

        // A buffer of rank 1's backend, given to rank 0.
        let other = recs[1].device_buffer::<f32>(1024);
        let (node, p) = problem(
            dag.add_all_reduce(&c0, &a, &other, ReduceOp::Sum)
                .unwrap_err(),
        );
        assert!(node.starts_with("collective#"), "{node}");
        assert!(p.contains("receive buffer belongs to"), "{p}");
    }

    #[test]
    fn validation_names_the_node_on_the_wrong_device() {
        let (mut recs, comms) = two_ranks();
        let a = recs[1].device_buffer::<i32>(16);
        let mut dag = Dag::new();
        let id = dag
            .add_all_reduce(&comms.comm(1).unwrap(), &a, &a, ReduceOp::Sum)
            .unwrap();
        dag.set_name(id, "grad sum");
        let (node, p) = problem(dag.lower(&mut recs[0]).unwrap_err());
        assert_eq!(node, "grad sum");
        assert!(p.contains("rank 1"), "{p}");
        dag.lower(&mut recs[1]).unwrap();
    }

    /// A stream call's buffer checks name the call and rank, not a node (issue 25): they run
    /// before the recording communicators are refused as placeholders.
    #[test]
    fn stream_calls_name_the_call_not_a_node() {
        let (mut recs, comms) = two_ranks();
        let a0 = recs[0].device_buffer::<f32>(64);
        let a1 = recs[1].device_buffer::<f32>(64);
        // Rank 1 given rank 0's buffer.
        let e = comms
            .all_reduce(&[&a0, &a0], &[&a0, &a1], ReduceOp::Sum, &[])
            .unwrap_err();
        assert!(
            matches!(&e, Error::WrongDevice { node: None, problem }
                if problem.starts_with("all_reduce (rank 1): the send buffer belongs to")),
            "{e:?}"
        );
        // A buffer that is not device memory (no stream call takes one: checked on the parts).
        let h = recs[0].host_buffer::<f32>(64);
        let c0 = comms.comm(0).unwrap();
        let mut part =
            Collective::make(&c0, Kind::AllReduce { op: ReduceOp::Sum }, &a0, &a0).unwrap();
        part.recv = Some(Region::from(&h));
        let key = recs[0].device_key(0);
        let e = part
            .check_owners(
                OwnerCheck::Call {
                    call: "all_reduce",
                    rank: 0,
                },
                key,
            )
            .unwrap_err();
        assert!(
            matches!(&e, Error::CollectiveCall { call, problem }
                if call == "all_reduce (rank 0)" && problem == "the receive buffer is not device memory"),
            "{e:?}"
        );
        let e = part
            .check_owners(OwnerCheck::Node(&"sum"), key)
            .unwrap_err();
        assert!(
            matches!(&e, Error::Dag(DagError::Collective { node, problem })
                if node == "sum" && problem == "the receive buffer is not device memory"),
            "{e:?}"
        );
        // Well-formed buffers: the placeholders are refused.
        let e = comms
            .all_reduce(&[&a0, &a1], &[&a0, &a1], ReduceOp::Sum, &[])
            .unwrap_err();
        assert!(matches!(e, Error::Placeholder { .. }), "{e:?}");
    }

    fn ring_dags(recs: &mut [RecordingBackend], comms: &Communicators) -> Vec<Dag> {
        (0..2)
            .map(|r| {
                let c = comms.comm(r).unwrap();
                let x = recs[r].device_buffer::<f32>(1024);
                let y = recs[r].device_buffer::<f32>(2048);
                let z = recs[r].device_buffer::<f32>(512);
                let mut dag = Dag::new();
                let fill = dag.add_memset(&x, 0u32).unwrap();
                let ar = dag.add_all_reduce(&c, &x, &x, ReduceOp::Sum).unwrap();
                let ag = dag.add_all_gather(&c, &x, &y).unwrap();
                let rs = dag.add_reduce_scatter(&c, &x, &z, ReduceOp::Max).unwrap();
                let bc = dag.add_broadcast(&c, &y, &y, 1).unwrap();
                let sr = dag.add_send_recv(&c, &z, 1 - r, &z, 1 - r);
                assert!(sr.is_err(), "same buffer for send and receive");
                let w = recs[r].device_buffer::<f32>(512);
                let sr = dag.add_send_recv(&c, &z, 1 - r, &w, 1 - r).unwrap();
                dag.chain(&[fill, ar, ag, rs, bc, sr]).unwrap();
                dag
            })
            .collect()
    }

    #[test]
    fn transcript_and_dot_of_collective_nodes() {
        let (mut recs, comms) = two_ranks();
        let dags = ring_dags(&mut recs, &comms);
        dags[1].lower(&mut recs[1]).unwrap();
        let t = recs[1].transcript();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 6, "{t}");
        assert!(lines[0].contains("memset"), "{t}");
        assert_eq!(
            lines[1],
            "1 cudaStreamBeginCaptureToGraph captured `collective#1` deps=[0] nccl all-reduce \
             sum f32 x1024 in place rank=1/2"
        );
        assert!(
            lines[2].ends_with("nccl all-gather f32 x1024 per rank rank=1/2"),
            "{t}"
        );
        assert!(
            lines[3].contains("reduce-scatter max f32 x512 per rank"),
            "{t}"
        );
        assert!(
            lines[4].contains("broadcast f32 x2048 from rank 1 in place"),
            "{t}"
        );
        assert!(
            lines[5].contains("send f32 x512 to rank 0 + recv f32 x512 from rank 0"),
            "{t}"
        );
        let dot = dags[0].to_dot();
        assert!(dot.contains("all-reduce sum f32 x1024 in place"), "{dot}");
        assert!(dot.contains("rank 0 of 2"), "{dot}");
        assert!(dot.contains("hexagon"), "{dot}");
    }

    #[test]
    fn ranks_that_fit_together_pass() {
        let (mut recs, comms) = two_ranks();
        let dags = ring_dags(&mut recs, &comms);
        comms.check_ranks(&[&dags[0], &dags[1]]).unwrap();
        // The wrong rank order, a missing rank.
        let e = comms.check_ranks(&[&dags[1], &dags[0]]).unwrap_err();
        assert!(e.to_string().contains("is rank 1's"), "{e}");
        let e = comms.check_ranks(&[&dags[0]]).unwrap_err();
        assert!(
            matches!(&e, Error::RankMismatch { call: "Communicators::check_ranks", problem }
                if problem.contains("2 ranks, but 1 DAGs")),
            "{e:?}"
        );
        // Recording communicators cannot instantiate.
        let Err(e) = comms.instantiate(&[&dags[0], &dags[1]]) else {
            panic!("recording communicators instantiated");
        };
        assert!(matches!(e, Error::Placeholder { .. }), "{e:?}");
        assert!(e.to_string().contains("no NCCL behind it"), "{e}");
    }

    #[test]
    fn communicators_errors_are_typed() {
        let (mut recs, comms) = two_ranks();
        assert!(
            matches!(comms.comm(2), Err(Error::NoSuchRank { rank: 2, ranks: 2 })),
            "{:?}",
            comms.comm(2)
        );
        assert_eq!(
            comms.comm(5).unwrap_err().to_string(),
            "rank 5 does not exist (2 ranks)"
        );
        let a0 = recs[0].device_buffer::<f32>(64);
        let a1 = recs[1].device_buffer::<f32>(64);
        let b1 = recs[1].device_buffer::<f32>(32);
        // Not one buffer per rank: refused before the communicators are used.
        let e = comms
            .all_reduce(&[&a0], &[&a0], ReduceOp::Sum, &[])
            .unwrap_err();
        assert!(
            matches!(&e, Error::RankMismatch { call: "all_reduce", problem }
                if problem.contains("2 ranks, but 1 send and 1 receive buffers")),
            "{e:?}"
        );
        // A rank's buffers that do not fit: the call and the rank are named.
        let e = comms
            .broadcast(&[&a0, &a1], &[&a0, &b1], 0, &[])
            .unwrap_err();
        assert!(
            matches!(&e, Error::CollectiveCall { call, problem }
                if call == "broadcast (rank 1)" && problem.contains("64") && problem.contains("32")),
            "{e:?}"
        );
        let e = comms
            .broadcast(&[&a0, &a1], &[&a0, &a1], 2, &[])
            .unwrap_err();
        assert!(
            matches!(&e, Error::CollectiveCall { problem, .. } if problem.contains("root 2")),
            "{e:?}"
        );
        let e = comms
            .send_recv(&[&a0, &a1], &[1], &[&a0, &a1], &[1, 0], &[])
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::RankMismatch {
                    call: "send_recv",
                    ..
                }
            ),
            "{e:?}"
        );
        // Well-formed, but the communicators are placeholders.
        let e = comms.all_gather(&[&a0, &a1], &[&a0, &a1], &[]).unwrap_err();
        assert!(matches!(e, Error::CollectiveCall { .. }), "{e:?}");
        let e = comms
            .all_reduce(&[&a0, &a1], &[&a0, &a1], ReduceOp::Sum, &[])
            .unwrap_err();
        assert!(matches!(e, Error::Placeholder { .. }), "{e:?}");
        assert!(matches!(comms.nccl_info(), Err(Error::Placeholder { .. })));
    }

    #[test]
    fn mismatched_unordered_or_unmatched_collectives_are_refused() {
        let (mut recs, comms) = two_ranks();
        let (c0, c1) = (comms.comm(0).unwrap(), comms.comm(1).unwrap());
        let a0 = recs[0].device_buffer::<f32>(64);
        let a1 = recs[1].device_buffer::<f32>(32);
        let b1 = recs[1].device_buffer::<f32>(64);
        let mut d0 = Dag::new();
        d0.add_all_reduce(&c0, &a0, &a0, ReduceOp::Sum).unwrap();
        let mut d1 = Dag::new();
        let n = d1.add_all_reduce(&c1, &a1, &a1, ReduceOp::Sum).unwrap();
        d1.set_name(n, "short");
        let (node, p) = problem(comms.check_ranks(&[&d0, &d1]).unwrap_err());
        assert_eq!(node, "short");
        assert!(p.contains("does not match rank 0's"), "{p}");

        // Two collectives not ordered by a dependency.
        let mut d1 = Dag::new();
        d1.add_all_reduce(&c1, &b1, &b1, ReduceOp::Sum).unwrap();
        d1.add_all_reduce(&c1, &b1, &b1, ReduceOp::Sum).unwrap();
        let (node, p) = problem(comms.check_ranks(&[&d0, &d1]).unwrap_err());
        assert_eq!(node, "collective#1");
        assert!(p.contains("not ordered after"), "{p}");

        // A send without a receive.
        let mut d0 = Dag::new();
        d0.add_send(&c0, &a0, 1).unwrap();
        let (_, p) = problem(comms.check_ranks(&[&d0, &Dag::new()]).unwrap_err());
        assert!(p.contains("no matching receive on rank 1"), "{p}");
        // A receive of another length.
        let mut d1 = Dag::new();
        d1.add_recv(&c1, &a1, 0).unwrap();
        let (_, p) = problem(comms.check_ranks(&[&d0, &d1]).unwrap_err());
        assert!(p.contains("x32") && p.contains("x64"), "{p}");
    }

    #[test]
    fn sends_before_receives_on_both_ranks_are_a_cycle() {
        let (mut recs, comms) = two_ranks();
        let dags: Vec<Dag> = (0..2)
            .map(|r| {
                let c = comms.comm(r).unwrap();
                let s = recs[r].device_buffer::<u8>(1 << 20);
                let d = recs[r].device_buffer::<u8>(1 << 20);
                let mut dag = Dag::new();
                let a = dag.add_send(&c, &s, 1 - r).unwrap();
                let b = dag.add_recv(&c, &d, 1 - r).unwrap();
                dag.add_dependency(a, b).unwrap();
                dag
            })
            .collect();
        let (_, p) = problem(comms.check_ranks(&[&dags[0], &dags[1]]).unwrap_err());
        assert!(p.contains("cycle"), "{p}");
        // Rank 1 receiving first is fine.
        let c1 = comms.comm(1).unwrap();
        let s = recs[1].device_buffer::<u8>(1 << 20);
        let d = recs[1].device_buffer::<u8>(1 << 20);
        let mut d1 = Dag::new();
        let b = d1.add_recv(&c1, &d, 0).unwrap();
        let a = d1.add_send(&c1, &s, 0).unwrap();
        d1.add_dependency(b, a).unwrap();
        comms.check_ranks(&[&dags[0], &d1]).unwrap();
    }

    #[test]
    fn collectives_in_child_dags_are_refused() {
        let (mut recs, comms) = two_ranks();
        let dags: Vec<Dag> = (0..2)
            .map(|r| {
                let a = recs[r].device_buffer::<u32>(4);
                let mut inner = Dag::new();
                inner
                    .add_all_reduce(&comms.comm(r).unwrap(), &a, &a, ReduceOp::Min)
                    .unwrap();
                let mut dag = Dag::new();
                dag.add_child(&inner);
                dag
            })
            .collect();
        let (node, p) = problem(comms.check_ranks(&[&dags[0], &dags[1]]).unwrap_err());
        assert_eq!(node, "child#0");
        assert!(p.contains("collective#0"), "{p}");
    }

    #[test]
    fn capture_outside_instantiate_is_an_error_not_a_hang() {
        let (mut recs, comms) = two_ranks();
        let a = recs[0].device_buffer::<f64>(8);
        let c0 = comms.comm(0).unwrap();
        let op = ReduceOp::Avg;
        let node = CollectiveNode {
            coll: Collective::make(&c0, Kind::AllReduce { op }, &a, &a).unwrap(),
            comm: c0,
        };
        // SAFETY: the call returns before it would use the stream.
        let e = unsafe { node.enqueue(std::ptr::null_mut()) }.unwrap_err();
        assert!(
            matches!(&e, Error::CollectiveOutsideInstantiate { collective }
                if collective == "all-reduce avg f64 x8 in place, rank 0 of 2"),
            "{e:?}"
        );
        assert!(e.to_string().contains("Communicators::instantiate"), "{e}");
    }
}
