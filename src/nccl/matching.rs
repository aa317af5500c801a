//! Matching the ranks' collective operations: every rank issues the same collectives in the
//! same order, and the sends and receives pair up without a cycle (for the stream calls in
//! `nccl/mod.rs`, and for DAGs in `dag/nodes/nccl.rs`).

use petgraph::graph::DiGraph;

use super::{collective_error, Collective, Communicators, Kind};
use crate::error::{Error, Result};

/// One rank's collective operations, in order: (node name, collective).
pub(crate) type RankOps<'a> = Vec<(String, &'a Collective)>;

/// The check of [`Communicators::check_ranks`] for one call per rank (the stream calls).
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

pub(crate) fn match_ranks(ranks: &[RankOps], what: &str) -> Result<()> {
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
            Error::CollectiveCall {
                call: name.to_string(),
                problem,
            }
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
