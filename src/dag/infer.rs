//! Dependencies inferred from data access ([`Dag::infer_dependencies`]) and the race check
//! ([`Dag::races`]), issue 31.
//!
//! # What each node touches
//!
//! Accesses are byte ranges of allocations: an allocation is one `Arc<Allocation>` (a
//! [`DeviceBuffer`](crate::DeviceBuffer) or [`HostBuffer`](crate::HostBuffer) and every
//! [`Region`] of it), a range is a region's `offset..offset + len`. Two accesses conflict when
//! they are in the same allocation, their ranges overlap (partial overlaps count, touching ends
//! do not), and at least one writes.
//!
//! | node | touches |
//! |---|---|
//! | kernel | each buffer argument: marked [`In`](crate::In) read, [`Out`](crate::Out) written, [`InOut`](crate::InOut) both, in the bytes it passes (a region's range, all of a buffer); **unmarked: read and written, all of its allocation** (conservative: an unmarked `&x` orders the node against every other use of `x`); values: nothing |
//! | copy | `dst` written, `src` read (the regions given, also for 2D copies: a superset of the rows' bytes) |
//! | memset | its region written |
//! | FFT | `input` read, `output` written (in place: both, one range) |
//! | collective | the send region read, the receive region written |
//! | captured | each declared region read and written (the crate cannot see which) |
//! | host | **everything**: a closure's captures are invisible, so a host node is ordered against every node that touches anything, and every other host node |
//! | child, conditional | what the nodes of its graph (its bodies) touch, together |
//! | empty, event record/wait, graph alloc/free | nothing |
//!
//! Graph-allocated buffers ([`GraphBuffer`](crate::GraphBuffer)) are not seen (a kernel
//! argument passing one, a fill of one): order their users with explicit edges.
//!
//! # Cost
//!
//! Both passes walk the nodes in program order and keep each node's ancestors as a bitset of
//! the positions before it: O(n + e) set unions of at most n/64 words (n nodes, e edges after
//! inference), n²/128 words of memory in one allocation (6.25 MB for 10,000 nodes).
//!
//! Inference compares each access only with the *frontier* of the bytes it touches: per
//! allocation, disjoint byte ranges (an ordered map), each with its latest writer and the
//! readers since. An access costs O(log s + k) for s ranges and k frontier entries it meets,
//! and a write replaces the entries it covers, so a chain of writers of one buffer costs O(1)
//! per node where comparing with every earlier access cost O(n). In all,
//! O(n·(n + e)/64 + a·log a + f) for a accesses and f frontier entries met (at most the
//! number of conflicting pairs, usually a small multiple of a): near-linear but for the
//! bitsets. The race check must name every unordered conflicting pair, so it compares each
//! access with every earlier access to its allocation: O(n·(n + e)/64 + a²) at worst (every
//! node on one buffer).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::hash::BuildHasherDefault;
use std::ops::Range;
use std::sync::Arc;

use petgraph::stable_graph::NodeIndex;
use petgraph::visit::NodeIndexable;
use petgraph::Direction;

use super::exec::AddrHasher;
use super::nodes::memset::FillTarget;
use super::{Dag, Dependency, NodeId, Op};
use crate::kernel::Access;
use crate::memory::{Allocation, Region};

/// Which hazard an inferred edge prevents (or a [`Race`] is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HazardKind {
    /// The later node reads what the earlier one writes (RAW).
    ReadAfterWrite,
    /// The later node writes what the earlier one reads (WAR).
    WriteAfterRead,
    /// Both write (WAW).
    WriteAfterWrite,
}

impl HazardKind {
    /// The short name: `RAW`, `WAR`, `WAW`.
    pub fn short(self) -> &'static str {
        match self {
            HazardKind::ReadAfterWrite => "RAW",
            HazardKind::WriteAfterRead => "WAR",
            HazardKind::WriteAfterWrite => "WAW",
        }
    }
}

/// What an inferred edge protects: the hazard, the allocation and the overlapping bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hazard {
    /// The hazard.
    pub kind: HazardKind,
    /// The allocation's address (device or pinned host; a recording backend's placeholder),
    /// or `None` when one of the nodes is a host node, which counts as touching everything.
    pub buffer: Option<u64>,
    /// The bytes of the allocation both nodes touch (`0..usize::MAX` for everything).
    pub range: Range<usize>,
}

impl fmt::Display for Hazard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.buffer {
            Some(a) => write!(
                f,
                "{} {a:#x}[{}..{}]",
                self.kind.short(),
                self.range.start,
                self.range.end
            ),
            None => write!(f, "{} everything (host node)", self.kind.short()),
        }
    }
}

/// An edge [`Dag::infer_dependencies`] added: `before` must finish before `after` starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferredEdge {
    /// The node first in program order.
    pub before: NodeId,
    /// The node that waits.
    pub after: NodeId,
    /// The hazard it prevents (one of them, when the nodes share several).
    pub hazard: Hazard,
}

/// Two nodes that touch overlapping bytes, at least one writing, with no path between them
/// ([`Dag::races`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Race {
    /// The node first in program order.
    pub first: NodeId,
    /// The other node.
    pub second: NodeId,
    /// `first`'s name.
    pub first_name: String,
    /// `second`'s name.
    pub second_name: String,
    /// What they both touch, named as the hazard an edge `first -> second` would prevent.
    pub hazard: Hazard,
}

impl fmt::Display for Race {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "race between `{}` and `{}`: {} with no path between them",
            self.first_name, self.second_name, self.hazard
        )
    }
}

/// One access: an allocation (by identity), its address, a byte range and how.
#[derive(Debug, Clone, Copy)]
struct Touch {
    alloc: usize,
    addr: u64,
    start: usize,
    end: usize,
    access: Access,
}

impl Touch {
    fn of(alloc: &Arc<Allocation>, start: usize, len: usize, access: Access) -> Touch {
        Touch {
            alloc: Arc::as_ptr(alloc) as usize,
            addr: alloc.ptr,
            start,
            end: start.saturating_add(len),
            access,
        }
    }
    fn region(r: &Region, access: Access) -> Touch {
        Touch::of(&r.alloc, r.offset, r.len, access)
    }
}

/// What a node touches: a list of accesses, or everything.
#[derive(Default)]
struct Uses {
    touches: Vec<Touch>,
    all: bool,
}

impl Uses {
    fn any(&self) -> bool {
        self.all || !self.touches.is_empty()
    }
    fn writes(&self) -> bool {
        self.all || self.touches.iter().any(|t| t.access.writes())
    }
}

/// Adds what `op` touches to `out` (the table in the module's docs).
fn collect(op: &Op, out: &mut Uses) {
    let region = |r: &Region, a: Access, out: &mut Uses| out.touches.push(Touch::region(r, a));
    match op {
        Op::Kernel(k) => {
            let marks: &[_] = k.marks.as_deref().map_or(&[], |m| m.0.as_slice());
            for (i, slot) in k.args.buffers().iter().enumerate() {
                let Some(alloc) = slot else { continue };
                let t = match marks.iter().find(|m| m.0 as usize == i) {
                    Some(&(_, access, offset, len)) => Touch::of(alloc, offset, len, access),
                    None => Touch::of(alloc, 0, alloc.bytes, Access::ReadWrite),
                };
                out.touches.push(t);
            }
        }
        Op::Memcpy(m) => {
            region(&m.dst, Access::Write, out);
            region(&m.src, Access::Read, out);
        }
        Op::Memset(m) => {
            if let FillTarget::Region(r) = &m.dst {
                region(r, Access::Write, out);
            }
        }
        Op::Fft(f) => {
            region(&f.input, Access::Read, out);
            region(&f.output, Access::Write, out);
        }
        Op::Collective(c) => {
            if let Some(r) = &c.coll.send {
                region(r, Access::Read, out);
            }
            if let Some(r) = &c.coll.recv {
                region(r, Access::Write, out);
            }
        }
        Op::Captured(c) => {
            for r in &c.uses {
                region(r, Access::ReadWrite, out);
            }
        }
        Op::Host(_) => out.all = true,
        Op::Child(c) => {
            for n in c.dag().graph.node_weights() {
                collect(&n.op, out);
            }
        }
        Op::Conditional(c) => {
            for body in c.bodies() {
                for n in body.graph.node_weights() {
                    collect(&n.op, out);
                }
            }
        }
        Op::Empty(_) | Op::EventRecord(_) | Op::EventWait(_) | Op::MemAlloc(_) | Op::MemFree(_) => {
        }
    }
}

/// The hazard of `early` then `late` touching overlapping bytes, if one.
fn conflict(early: &Touch, late: &Touch) -> Option<Hazard> {
    if early.alloc != late.alloc {
        return None;
    }
    let (start, end) = (early.start.max(late.start), early.end.min(late.end));
    if start >= end {
        return None;
    }
    let kind = kind_of(
        early.access.writes(),
        late.access.reads(),
        late.access.writes(),
    )?;
    Some(Hazard {
        kind,
        buffer: Some(early.addr),
        range: start..end,
    })
}

/// The hazard of an earlier node (writing or not) then a later one (reading, writing).
fn kind_of(early_writes: bool, late_reads: bool, late_writes: bool) -> Option<HazardKind> {
    if early_writes && late_reads {
        Some(HazardKind::ReadAfterWrite)
    } else if early_writes && late_writes {
        Some(HazardKind::WriteAfterWrite)
    } else if late_writes {
        Some(HazardKind::WriteAfterRead)
    } else {
        None
    }
}

/// Each node's ancestors as a bitset of positions in program order. They all come before it,
/// so node `j`'s row has `j` bits: the rows take n²/128 words together, in one allocation.
struct Ancestors {
    /// Where each row starts in `bits` (and, at `j + 1`, where row `j` ends).
    start: Vec<usize>,
    bits: Vec<u64>,
}

impl Ancestors {
    fn new(n: usize) -> Ancestors {
        let mut start = Vec::with_capacity(n + 1);
        let mut at = 0;
        for j in 0..=n {
            start.push(at);
            at += j.div_ceil(64);
        }
        Ancestors {
            start,
            bits: vec![0; at],
        }
    }

    /// Whether node `i` (before `j`) is an ancestor of node `j`.
    fn has(&self, j: usize, i: usize) -> bool {
        debug_assert!(i < j);
        self.bits[self.start[j] + i / 64] >> (i % 64) & 1 == 1
    }

    /// Makes node `i` (before `j`) and its ancestors ancestors of node `j`.
    fn add(&mut self, j: usize, i: usize) {
        debug_assert!(i < j);
        let (lo, hi) = self.bits.split_at_mut(self.start[j]);
        let row_i = &lo[self.start[i]..self.start[i + 1]];
        let row_j = &mut hi[..self.start[j + 1] - self.start[j]];
        for (a, b) in row_j.iter_mut().zip(row_i) {
            *a |= b;
        }
        row_j[i / 64] |= 1 << (i % 64);
    }
}

/// Program order: the nodes in the order they were added, except that a node comes after all
/// its predecessors (an edge from a node added later pulls that node, and its own
/// predecessors, ahead of it): a depth-first post-order over incoming edges, nodes and
/// predecessors taken by serial. Serial order when every edge goes forward.
fn program_order(dag: &Dag) -> Vec<NodeId> {
    let mut nodes: Vec<NodeIndex> = dag.graph.node_indices().collect();
    nodes.sort_unstable_by_key(|&i| dag.graph[i].serial);
    let mut placed = vec![false; dag.graph.node_bound()];
    let mut order = Vec::with_capacity(nodes.len());
    let mut preds = Vec::new();
    // (node, its predecessors by serial, the next one to visit)
    let mut stack: Vec<(NodeIndex, Vec<NodeIndex>, usize)> = Vec::new();
    for start in nodes {
        if placed[start.index()] {
            continue;
        }
        placed[start.index()] = true;
        let sorted = |i: NodeIndex, preds: &mut Vec<NodeIndex>| {
            preds.clear();
            preds.extend(dag.graph.neighbors_directed(i, Direction::Incoming));
            preds.sort_unstable_by_key(|&p| dag.graph[p].serial);
            preds.clone()
        };
        stack.push((start, sorted(start, &mut preds), 0));
        while let Some((node, ps, next)) = stack.last_mut() {
            if let Some(&p) = ps.get(*next) {
                *next += 1;
                if !placed[p.index()] {
                    placed[p.index()] = true;
                    let ps = sorted(p, &mut preds);
                    stack.push((p, ps, 0));
                }
            } else {
                order.push(dag.id_at(*node));
                stack.pop();
            }
        }
    }
    order
}

/// The walk both passes share: nodes in program order with what they touch, and the earlier
/// accesses they may conflict with.
///
/// The race check needs every earlier conflicting node (`Earlier::All`: each allocation's
/// whole history). Inference needs only the *frontier* of each byte (`Earlier::Frontier`):
/// its latest writer and the readers since; an older access to the byte conflicts with that
/// writer (or, a reader, with nothing newer than it), so inference already made it an ancestor
/// of the frontier, and a node ordered after the frontier is ordered after it. Likewise for
/// host nodes: the latest one follows every earlier node that touches anything.
struct Walk {
    order: Vec<NodeId>,
    /// Position in `order`, by node index.
    pos: Vec<usize>,
    uses: Vec<Uses>,
    earlier: Earlier,
    /// Which position `seen` last marked for (`j + 1`).
    seen: Vec<usize>,
}

/// Maps keyed by an allocation's address (`Touch::alloc`), hashed as the `Exec`'s are.
type ByAlloc<V> = HashMap<usize, V, BuildHasherDefault<AddrHasher>>;

/// The earlier accesses a node is compared with.
enum Earlier {
    /// Every one (the race check).
    All {
        /// Per allocation: (position, access).
        history: ByAlloc<Vec<(usize, Touch)>>,
        /// Nodes that touch everything.
        alls: Vec<usize>,
        /// Nodes that touch anything.
        anys: Vec<usize>,
    },
    /// The frontier of each byte (inference).
    Frontier {
        /// Per allocation: its bytes' frontiers.
        allocs: ByAlloc<Segments>,
        /// The latest node that touches everything.
        last_all: Option<usize>,
        /// The nodes that touch anything since then.
        anys: Vec<usize>,
    },
}

/// The frontier of an allocation's bytes: disjoint ranges by start, each with its latest
/// writer and the readers since (bytes never touched have no segment).
#[derive(Default)]
struct Segments(BTreeMap<usize, Segment>);

#[derive(Clone)]
struct Segment {
    end: usize,
    writer: Option<(usize, Touch)>,
    readers: Vec<(usize, Touch)>,
}

impl Segments {
    /// Calls `f` with every segment overlapping `start..end`.
    fn overlapping(&self, start: usize, end: usize, mut f: impl FnMut(&Segment)) {
        // The segment starting before `start` may reach into the range.
        if let Some((_, s)) = self.0.range(..start).next_back() {
            if s.end > start {
                f(s);
            }
        }
        for (_, s) in self.0.range(start..end) {
            f(s);
        }
    }

    /// Makes `at` a segment boundary (splitting the segment across it).
    fn split(&mut self, at: usize) {
        let Some((&s, seg)) = self.0.range(..at).next_back() else {
            return;
        };
        if seg.end > at {
            let mut right = seg.clone();
            self.0.get_mut(&s).expect("found above").end = at;
            right.end = right.end.max(at);
            self.0.insert(at, right);
        }
    }

    /// Node `j` writes `start..end` (`t`): it becomes the bytes' writer, with no readers.
    fn write(&mut self, j: usize, t: Touch) {
        self.split(t.start);
        self.split(t.end);
        let inside: Vec<usize> = self.0.range(t.start..t.end).map(|(&k, _)| k).collect();
        for k in inside {
            self.0.remove(&k);
        }
        self.0.insert(
            t.start,
            Segment {
                end: t.end,
                writer: Some((j, t)),
                readers: Vec::new(),
            },
        );
    }

    /// Node `j` reads `start..end` (`t`): it joins the bytes' readers.
    fn read(&mut self, j: usize, t: Touch) {
        self.split(t.start);
        self.split(t.end);
        let mut at = t.start;
        let mut gaps = Vec::new();
        for (&k, seg) in self.0.range_mut(t.start..t.end) {
            if k > at {
                gaps.push((at, k));
            }
            seg.readers.push((j, t));
            at = seg.end;
        }
        if at < t.end {
            gaps.push((at, t.end));
        }
        for (s, e) in gaps {
            self.0.insert(
                s,
                Segment {
                    end: e,
                    writer: None,
                    readers: vec![(j, t)],
                },
            );
        }
    }
}

impl Walk {
    /// The walk of `dag`; `all`: compare with every earlier access (the race check), else with
    /// the frontier (inference).
    fn new(dag: &Dag, all: bool) -> Walk {
        let order = program_order(dag);
        let mut pos = vec![usize::MAX; dag.graph.node_bound()];
        let mut uses = Vec::with_capacity(order.len());
        for (p, id) in order.iter().enumerate() {
            pos[id.idx.index()] = p;
            let mut u = Uses::default();
            collect(&dag.graph[id.idx].op, &mut u);
            uses.push(u);
        }
        let n = order.len();
        let earlier = if all {
            Earlier::All {
                history: ByAlloc::default(),
                alls: Vec::new(),
                anys: Vec::new(),
            }
        } else {
            Earlier::Frontier {
                allocs: ByAlloc::default(),
                last_all: None,
                anys: Vec::new(),
            }
        };
        Walk {
            order,
            pos,
            uses,
            earlier,
            seen: vec![0; n],
        }
    }

    /// The earlier nodes node `j` conflicts with (all of them, or those of the frontier), each
    /// once, with the first hazard found.
    fn conflicts(&mut self, j: usize, found: &mut Vec<(usize, Hazard)>) {
        found.clear();
        let uj = &self.uses[j];
        let uses = &self.uses;
        let seen = &mut self.seen;
        let everything = |kind| Hazard {
            kind,
            buffer: None,
            range: 0..usize::MAX,
        };
        let (alls, anys): (&[usize], &[usize]) = match &self.earlier {
            Earlier::All { alls, anys, .. } => (alls, anys),
            Earlier::Frontier { last_all, anys, .. } => (last_all.as_slice(), anys),
        };
        if uj.all {
            for &i in alls.iter().chain(anys) {
                if seen[i] == j + 1 {
                    continue;
                }
                let kind = kind_of(uses[i].writes(), true, true).expect("a write");
                found.push((i, everything(kind)));
                seen[i] = j + 1;
            }
            return;
        }
        if !uj.any() {
            return;
        }
        for &i in alls {
            let kind = kind_of(
                true,
                uj.touches.iter().any(|t| t.access.reads()),
                uj.writes(),
            )
            .expect("a write");
            found.push((i, everything(kind)));
            seen[i] = j + 1;
        }
        let mut check = |i: usize, e: &Touch, t: &Touch| {
            if seen[i] != j + 1 {
                if let Some(h) = conflict(e, t) {
                    seen[i] = j + 1;
                    found.push((i, h));
                }
            }
        };
        for t in &uj.touches {
            match &self.earlier {
                Earlier::All { history, .. } => {
                    for (i, e) in history.get(&t.alloc).into_iter().flatten() {
                        check(*i, e, t);
                    }
                }
                Earlier::Frontier { allocs, .. } => {
                    let Some(segs) = allocs.get(&t.alloc) else {
                        continue;
                    };
                    segs.overlapping(t.start, t.end, |seg| {
                        if let Some((i, e)) = &seg.writer {
                            check(*i, e, t);
                        }
                        if t.access.writes() {
                            for (i, e) in &seg.readers {
                                check(*i, e, t);
                            }
                        }
                    });
                }
            }
        }
    }

    /// Records node `j`'s accesses as earlier ones for the nodes after it.
    fn note(&mut self, j: usize) {
        let u = &self.uses[j];
        match &mut self.earlier {
            Earlier::All {
                history,
                alls,
                anys,
            } => {
                if u.all {
                    alls.push(j);
                }
                if u.any() {
                    anys.push(j);
                }
                for t in &u.touches {
                    history.entry(t.alloc).or_default().push((j, *t));
                }
            }
            Earlier::Frontier {
                allocs,
                last_all,
                anys,
            } => {
                if u.all {
                    // It follows every earlier node that touches anything now.
                    *last_all = Some(j);
                    anys.clear();
                    return;
                }
                if u.any() {
                    anys.push(j);
                }
                // Reads first: a node that reads and writes the same bytes is their writer.
                for t in u.touches.iter().filter(|t| !t.access.writes()) {
                    allocs.entry(t.alloc).or_default().read(j, *t);
                }
                for t in u.touches.iter().filter(|t| t.access.writes()) {
                    allocs.entry(t.alloc).or_default().write(j, *t);
                }
            }
        }
    }

    /// Adds to node `j`'s ancestors those through the DAG's current incoming edges (all from
    /// earlier positions), given those of the earlier nodes.
    fn ancestors(&self, dag: &Dag, j: usize, anc: &mut Ancestors) {
        for p in dag
            .graph
            .neighbors_directed(self.order[j].idx, Direction::Incoming)
        {
            anc.add(j, self.pos[p.index()]);
        }
    }
}

impl Dag {
    /// Adds the edges that the nodes' data accesses need and returns them: for every two nodes
    /// that touch overlapping bytes of one allocation, at least one writing, the later one in
    /// program order waits for the earlier one (read-after-write, write-after-read,
    /// write-after-write), unless a path between them exists already (explicit edges, or
    /// edges inferred before). Edges other edges imply are left out: a node waits only for the
    /// conflicting nodes that no other of its dependencies already follows, so in a chain
    /// `a -> b -> c` of writers of one buffer there is no `a -> c`. Reads of the same bytes
    /// stay parallel.
    ///
    /// Program order is the order the nodes were added in, except where the DAG's edges say
    /// otherwise: a node comes after its predecessors, so an explicit edge from a node added
    /// later pulls that node (and its own predecessors) ahead. What each kind of node counts as touching — an unmarked
    /// kernel buffer argument is read and written, all of it; a host node touches everything;
    /// graph buffers are not seen — is in the README's table ("Dependencies inferred from data
    /// access"); mark kernel arguments with [`In`](crate::In), [`Out`](crate::Out),
    /// [`InOut`](crate::InOut).
    ///
    /// The edges are stored as inferred ([`Dependency::inferred`] gives the hazard) and shown
    /// dashed in [`Dag::to_dot`], labelled with the hazard, buffer and range. Calling it again
    /// adds nothing new unless nodes were added. Edges added afterwards may make an inferred
    /// edge redundant; it stays.
    ///
    /// Cost: O(n·(n + e)/64) words of bitset work for n nodes and e edges, plus each access
    /// compared with the frontier of its bytes (their latest writer and the readers since):
    /// O(a·log a) for a accesses, plus the conflicting nodes met (see the module's docs).
    pub fn infer_dependencies(&mut self) -> Vec<InferredEdge> {
        let mut walk = Walk::new(self, false);
        let n = walk.order.len();
        let mut anc = Ancestors::new(n);
        let mut added = Vec::new();
        let mut found = Vec::new();
        for j in 0..n {
            walk.ancestors(self, j, &mut anc);
            walk.conflicts(j, &mut found);
            // Latest first: an earlier conflicting node that a later one follows is covered
            // by the edge from the later one (ancestors come earlier in program order).
            found.sort_unstable_by_key(|&(i, _)| std::cmp::Reverse(i));
            for (i, hazard) in found.drain(..) {
                if anc.has(j, i) {
                    continue;
                }
                anc.add(j, i);
                let (before, after) = (walk.order[i], walk.order[j]);
                self.graph.add_edge(
                    before.idx,
                    after.idx,
                    Dependency {
                        inferred: Some(Box::new(hazard.clone())),
                        programmatic: None,
                    },
                );
                if before.serial > after.serial {
                    self.backward_edges += 1;
                }
                added.push(InferredEdge {
                    before,
                    after,
                    hazard,
                });
            }
            walk.note(j);
        }
        added
    }

    /// Every race: two nodes that touch overlapping bytes of one allocation, at least one
    /// writing, with no path between them in either direction. One per pair (the first
    /// hazard found), the pairs in program order. What each node counts as touching is as for
    /// [`Dag::infer_dependencies`]. A DAG after `infer_dependencies` has none.
    ///
    /// Cost: the bitsets as for [`Dag::infer_dependencies`], plus every pair of accesses to
    /// one allocation compared (O(a²) in the worst case, a accesses: every pair may be a race).
    pub fn races(&self) -> Vec<Race> {
        let mut walk = Walk::new(self, true);
        let n = walk.order.len();
        let mut anc = Ancestors::new(n);
        let mut races = Vec::new();
        let mut found = Vec::new();
        for j in 0..n {
            walk.ancestors(self, j, &mut anc);
            walk.conflicts(j, &mut found);
            found.sort_unstable_by_key(|&(i, _)| i);
            for (i, hazard) in found.drain(..) {
                if !anc.has(j, i) {
                    let (first, second) = (walk.order[i], walk.order[j]);
                    races.push(Race {
                        first,
                        second,
                        first_name: self.graph[first.idx].name().to_string(),
                        second_name: self.graph[second.idx].name().to_string(),
                        hazard,
                    });
                }
            }
            walk.note(j);
        }
        races
    }
}
