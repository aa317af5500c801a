//! Property tests (proptest) of the builder, validation, lowering, DOT and update pairing, on
//! a [`RecordingBackend`].
//!
//! A case is a list of [`Step`]s: nodes of the kinds a recording backend offers (empty,
//! memset, copy, host, kernel of a placeholder kernel, event record and wait, child DAGs built
//! from their own steps), edges between any ids handed out so far (self-loops, edges that
//! close cycles, removed nodes), removals and names (quotes, backslashes, newlines, `->`,
//! braces), chains (all their edges or none). A [`Model`] kept beside the DAG (live nodes, edges) says what each step must do,
//! computed without the DAG's own code.
//!
//! Properties:
//! - `add_dependency` accepts exactly the edges between live, distinct nodes that close no
//!   cycle (the model's reachability), refuses the rest with the right error, and the DAG's
//!   nodes and edges stay the model's;
//! - `topological_order` holds every node once, respects every edge, and is the canonical
//!   order (Kahn's algorithm taking the ready node added first, computed from the model);
//! - lowering emits one call per node, named as the node, in canonical order, each after
//!   exactly the calls of its dependencies;
//! - the DOT text is read by Graphviz (`dot -Tcanon`) with one edge per dependency; without
//!   `dot` on PATH that check is skipped and the skipped cases are printed;
//! - update pairing: the same steps with the edges added afterwards in shuffled order give the
//!   same ids, edges, canonical order and calls, and pass [`check_same_topology`] (the host
//!   side of `Exec::update`); one edge more or less, or one node more, is refused by it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use super::exec::check_same_topology;
use super::*;
use crate::args;
use crate::device::DeviceLimits;
use crate::{DeviceBuffer, Event, HostBuffer, Kernel, LaunchConfig, Region};

/// Cases per property: small DAGs, so a few seconds in all in a debug build (a few under Miri,
/// which runs each case thousands of times slower).
const CASES: u32 = if cfg!(miri) { 4 } else { 256 };
/// Cases of the DOT property (one `dot` process each).
const DOT_CASES: u32 = 64;

#[derive(Debug, Clone)]
enum NodeSpec {
    Empty,
    /// A memset of device buffer `0..3` (of [`Env::device`]) to a value.
    Memset(Index, u32),
    /// A copy between two of [`Env::copy_ends`] (the same one twice is refused: overlap).
    Copy(Index, Index),
    Host,
    /// A kernel of [`Env::kernels`] on a device buffer.
    Kernel(Index, Index),
    EventRecord(Index),
    EventWait(Index),
    Child(Vec<Step>),
}

#[derive(Debug, Clone)]
enum Step {
    Add(NodeSpec),
    /// `add_dependency(before, after)`: indexes into the ids handed out so far.
    Edge(Index, Index),
    /// `chain(nodes)`: all its edges or none.
    Chain(Vec<Index>),
    Remove(Index),
    Name(Index, String),
}

fn name() -> impl Strategy<Value = String> {
    let chars = vec![
        'a', 'b', '"', '\\', '\n', '\r', '\t', '-', '>', '{', '}', ';', ' ', 'é',
    ];
    prop::collection::vec(prop::sample::select(chars), 0..6).prop_map(String::from_iter)
}

fn node_spec(depth: u32) -> BoxedStrategy<NodeSpec> {
    let leaf = prop_oneof![
        Just(NodeSpec::Empty),
        (any::<Index>(), any::<u32>()).prop_map(|(b, v)| NodeSpec::Memset(b, v)),
        (any::<Index>(), any::<Index>()).prop_map(|(d, s)| NodeSpec::Copy(d, s)),
        Just(NodeSpec::Host),
        (any::<Index>(), any::<Index>()).prop_map(|(k, b)| NodeSpec::Kernel(k, b)),
        any::<Index>().prop_map(NodeSpec::EventRecord),
        any::<Index>().prop_map(NodeSpec::EventWait),
    ];
    if depth == 0 {
        leaf.boxed()
    } else {
        prop_oneof![
            8 => leaf,
            1 => steps(depth - 1, 10).prop_map(NodeSpec::Child),
        ]
        .boxed()
    }
}

fn steps(depth: u32, max: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        4 => node_spec(depth).prop_map(Step::Add),
        5 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Step::Edge(a, b)),
        1 => prop::collection::vec(any::<Index>(), 0..4).prop_map(Step::Chain),
        1 => any::<Index>().prop_map(Step::Remove),
        1 => (any::<Index>(), name()).prop_map(|(i, n)| Step::Name(i, n)),
    ];
    prop::collection::vec(step, 0..max)
}

/// A top-level case: steps with child DAGs one level deep.
fn case() -> impl Strategy<Value = Vec<Step>> {
    steps(1, 40)
}

/// What the steps use: buffers, kernels and events of one recording device.
struct Env {
    device: Vec<DeviceBuffer<u32>>,
    host: HostBuffer<u32>,
    kernels: Vec<Kernel>,
    events: Vec<Event>,
}

impl Env {
    /// The environment and the backend its buffers, kernels and events belong to.
    fn new() -> (Env, RecordingBackend) {
        let mut rec = RecordingBackend::new(DeviceLimits::hopper());
        let device = (0..3).map(|_| rec.device_buffer::<u32>(256)).collect();
        let host = rec.host_buffer::<u32>(256);
        let kernels = vec![rec.kernel("scale", &[8, 4]), rec.kernel("shift", &[8, 4])];
        let events = vec![rec.event(), rec.event()];
        let env = Env {
            device,
            host,
            kernels,
            events,
        };
        (env, rec)
    }

    /// The ends a copy may use: the device buffers and the pinned host buffer.
    fn copy_end(&self, i: Index) -> Region {
        let n = self.device.len() + 1;
        match i.index(n) {
            j if j < self.device.len() => self.device[j].region(..),
            _ => self.host.region(..),
        }
    }
}

/// The DAG as the steps should leave it, kept without the DAG's code.
#[derive(Default, Clone)]
struct Model {
    live: BTreeSet<NodeId>,
    edges: BTreeSet<(NodeId, NodeId)>,
}

impl Model {
    /// Whether `to` can be reached from `from` along the model's edges (`from` itself too).
    fn reaches(&self, from: NodeId, to: NodeId) -> bool {
        let mut stack = vec![from];
        let mut seen = HashSet::new();
        while let Some(n) = stack.pop() {
            if n == to {
                return true;
            }
            if seen.insert(n) {
                stack.extend(self.edges.iter().filter(|e| e.0 == n).map(|e| e.1));
            }
        }
        false
    }

    /// The canonical order: Kahn's algorithm, taking the ready node added first (by serial).
    fn canonical_order(&self) -> Vec<NodeId> {
        let mut waiting: HashMap<NodeId, usize> = self.live.iter().map(|&n| (n, 0)).collect();
        for e in &self.edges {
            *waiting.get_mut(&e.1).unwrap() += 1;
        }
        let mut ready: BTreeSet<(u64, NodeId)> = waiting
            .iter()
            .filter(|(_, &w)| w == 0)
            .map(|(&n, _)| (n.serial(), n))
            .collect();
        let mut order = Vec::new();
        while let Some((_, n)) = ready.pop_first() {
            order.push(n);
            for e in self.edges.iter().filter(|e| e.0 == n) {
                let w = waiting.get_mut(&e.1).unwrap();
                *w -= 1;
                if *w == 0 {
                    ready.insert((e.1.serial(), e.1));
                }
            }
        }
        order
    }
}

/// Builds a DAG from steps, checking each step against the model. With `edges: false` edge
/// steps are skipped (the same nodes and ids, no dependencies).
struct Builder<'e> {
    env: &'e Env,
    dag: Dag,
    ids: Vec<NodeId>,
    model: Model,
    edges: bool,
}

type Check = Result<(), TestCaseError>;

impl Builder<'_> {
    fn id(&self, i: Index) -> Option<NodeId> {
        (!self.ids.is_empty()).then(|| self.ids[i.index(self.ids.len())])
    }

    fn added(&mut self, r: Result<NodeId>) -> Check {
        match r {
            Ok(id) => {
                prop_assert!(self.model.live.insert(id), "a new id: {id:?}");
                self.ids.push(id);
            }
            Err(_) => prop_assert_eq!(self.dag.node_count(), self.model.live.len()),
        }
        Ok(())
    }

    fn node(&mut self, spec: &NodeSpec) -> Result<NodeId> {
        let env = self.env;
        let dag = &mut self.dag;
        match spec {
            NodeSpec::Empty => Ok(dag.add_empty()),
            NodeSpec::Memset(b, v) => dag.add_memset(&env.device[b.index(env.device.len())], *v),
            NodeSpec::Copy(d, s) => dag.add_copy(dst(env.copy_end(*d)), src(env.copy_end(*s))),
            NodeSpec::Host => Ok(dag.add_host(|| {})),
            NodeSpec::Kernel(k, b) => {
                let buf = &env.device[b.index(env.device.len())];
                let k = &env.kernels[k.index(env.kernels.len())];
                dag.add_kernel(k, LaunchConfig::new(1, 64), &args![buf, 2.0f32])
            }
            NodeSpec::EventRecord(e) => Ok(dag.add_event_record(&env.events[e.index(2)])),
            NodeSpec::EventWait(e) => Ok(dag.add_event_wait(&env.events[e.index(2)])),
            NodeSpec::Child(_) => unreachable!("added by `step`"),
        }
    }

    fn step(&mut self, step: &Step) -> Check {
        match step {
            Step::Add(NodeSpec::Child(steps)) => {
                // The child's own steps are checked as it is built.
                let child = build(self.env, steps, true)?;
                let id = self.dag.add_child(&child.dag);
                self.added(Ok(id))?;
            }
            Step::Add(spec) => {
                let r = self.node(spec);
                self.added(r)?;
            }
            Step::Edge(a, b) if self.edges => {
                let (Some(a), Some(b)) = (self.id(*a), self.id(*b)) else {
                    return Ok(());
                };
                let m = &self.model;
                let known = m.live.contains(&a) && m.live.contains(&b);
                let closes_cycle = known && m.reaches(b, a);
                match self.dag.add_dependency(a, b) {
                    Ok(()) => {
                        prop_assert!(known && !closes_cycle, "{a:?} -> {b:?} accepted");
                        self.model.edges.insert((a, b));
                    }
                    Err(Error::Dag(DagError::UnknownNode(_))) => {
                        prop_assert!(!known, "{a:?} -> {b:?}: both nodes are known");
                    }
                    Err(Error::Dag(DagError::Cycle { nodes })) => {
                        prop_assert!(closes_cycle, "{a:?} -> {b:?} refused as a cycle");
                        prop_assert!(nodes.len() >= 2 && nodes.first() == nodes.last());
                    }
                    Err(e) => prop_assert!(false, "{a:?} -> {b:?}: unexpected {e}"),
                }
            }
            Step::Chain(list) if self.edges && !self.ids.is_empty() => {
                let list: Vec<NodeId> = list.iter().filter_map(|&i| self.id(i)).collect();
                // The edges one by one on a copy of the model: all of them, or none.
                let mut after = self.model.clone();
                let mut ok = true;
                for w in list.windows(2) {
                    let (a, b) = (w[0], w[1]);
                    if !after.live.contains(&a) || !after.live.contains(&b) || after.reaches(b, a) {
                        ok = false;
                        break;
                    }
                    after.edges.insert((a, b));
                }
                let r = self.dag.chain(&list);
                prop_assert_eq!(r.is_ok(), ok, "chain {:?}: {:?}", list, r);
                if ok {
                    self.model = after;
                }
            }
            Step::Edge(..) | Step::Chain(_) => {}
            Step::Remove(i) => {
                let Some(id) = self.id(*i) else {
                    return Ok(());
                };
                let live = self.model.live.remove(&id);
                prop_assert_eq!(self.dag.remove(id).is_ok(), live);
                prop_assert!(self.dag.node(id).is_err(), "a removed node is unknown");
                self.model.edges.retain(|e| e.0 != id && e.1 != id);
            }
            Step::Name(i, n) => {
                let Some(id) = self.id(*i) else {
                    return Ok(());
                };
                prop_assert_eq!(self.dag.set_name(id, n.clone()), id);
                if self.model.live.contains(&id) {
                    prop_assert_eq!(self.dag.node(id).unwrap().name().to_string(), n.clone());
                    let found = self.dag.find(n).expect("a node has that name");
                    prop_assert_eq!(self.dag.node(found).unwrap().name().to_string(), n.clone());
                }
            }
        }
        // The DAG's nodes and edges are the model's.
        let live: BTreeSet<NodeId> = self.dag.node_ids().collect();
        prop_assert_eq!(&live, &self.model.live);
        let edges: BTreeSet<(NodeId, NodeId)> = self.dag.edges().collect();
        prop_assert_eq!(&edges, &self.model.edges);
        prop_assert_eq!(self.dag.edge_count(), edges.len(), "no edge twice");
        Ok(())
    }
}

fn build<'e>(env: &'e Env, steps: &[Step], edges: bool) -> Result<Builder<'e>, TestCaseError> {
    let mut b = Builder {
        env,
        dag: Dag::new(),
        ids: Vec::new(),
        model: Model::default(),
        edges,
    };
    for s in steps {
        b.step(s)?;
    }
    Ok(b)
}

/// `topological_order`: every node once, after its dependencies, in canonical order.
fn check_order(b: &Builder) -> Check {
    let order = b.dag.topological_order();
    let position: HashMap<NodeId, usize> = order.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    prop_assert_eq!(order.len(), b.model.live.len(), "every node once");
    prop_assert_eq!(position.len(), order.len(), "no node twice");
    for &(a, z) in &b.model.edges {
        prop_assert!(position[&a] < position[&z], "{a:?} before {z:?}: {order:?}");
    }
    prop_assert_eq!(order, b.model.canonical_order(), "the canonical order");
    Ok(())
}

/// Lowering: one call per node, in canonical order, after exactly its dependencies' calls.
fn check_lowering(b: &Builder, rec: &mut RecordingBackend) -> Check {
    rec.clear();
    let handles = b
        .dag
        .lower(rec)
        .map_err(|e| TestCaseError::fail(format!("a valid DAG lowers: {e}")))?;
    let calls = rec.calls();
    prop_assert_eq!(calls.len(), b.model.live.len(), "one call per node");
    for (i, &n) in b.model.canonical_order().iter().enumerate() {
        let h = handles[n.index()];
        prop_assert_eq!(h, Some(i), "{:?} lowered in canonical order", n);
        let node = b.dag.node(n).unwrap();
        prop_assert_eq!(&calls[i].name, &node.name().to_string());
        let deps: BTreeSet<usize> = calls[i].deps.iter().copied().collect();
        prop_assert_eq!(deps.len(), calls[i].deps.len(), "no dependency twice");
        prop_assert!(
            deps.iter().all(|&d| d < i),
            "call {} after its dependencies",
            i
        );
        let want: BTreeSet<usize> = b
            .model
            .edges
            .iter()
            .filter(|e| e.1 == n)
            .map(|e| handles[e.0.index()].unwrap())
            .collect();
        prop_assert_eq!(deps, want, "call {} waits for its dependencies' calls", i);
    }
    Ok(())
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        // Failures are shrunk and reported here; nothing is written to the source tree.
        failure_persistence: None,
        ..Config::with_cases(cases)
    })
}

fn run(cases: u32, test: impl Fn(&[Step]) -> Check) {
    let result = runner(cases).run(&case(), |steps| test(&steps));
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn edges_are_refused_exactly_when_they_close_a_cycle() {
    let (env, _) = Env::new();
    run(CASES, |steps| build(&env, steps, true).map(|_| ()));
}

#[test]
fn topological_order_is_canonical_and_respects_every_edge() {
    let (env, _) = Env::new();
    run(CASES, |steps| check_order(&build(&env, steps, true)?));
}

#[test]
fn lowering_emits_each_node_once_after_its_dependencies() {
    let (env, rec) = Env::new();
    let rec = std::cell::RefCell::new(rec);
    run(CASES, |steps| {
        check_lowering(&build(&env, steps, true)?, &mut rec.borrow_mut())
    });
}

#[test]
#[cfg_attr(miri, ignore = "spawns Graphviz `dot`: Miri cannot run a process")]
fn dot_output_parses_with_graphviz() {
    let have_dot = Command::new("dot").arg("-V").output().is_ok();
    // CI installs Graphviz: there a missing `dot` is a failure, as in `tests::dot_renders_with_graphviz`.
    assert!(
        have_dot || std::env::var("CI").as_deref() != Ok("true"),
        "`dot` (Graphviz) is not on PATH under CI=true"
    );
    let skipped = AtomicUsize::new(0);
    let (env, _) = Env::new();
    run(DOT_CASES, |steps| {
        let b = build(&env, steps, true)?;
        let text = b.dag.to_dot();
        if !have_dot {
            skipped.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let mut child = Command::new("dot")
            .arg("-Tcanon")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dot starts");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        prop_assert!(out.status.success(), "dot refused:\n{stderr}\n{text}");
        prop_assert!(stderr.is_empty(), "dot warned:\n{stderr}\n{text}");
        // One `nA -> nB` line per dependency in Graphviz's canonical form.
        let canon = String::from_utf8_lossy(&out.stdout);
        let edge_lines = canon
            .lines()
            .filter(|l| {
                let mut w = l.split_whitespace();
                let is_node = |s: Option<&str>| {
                    s.and_then(|s| s.trim_end_matches(';').strip_prefix('n'))
                        .is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit()))
                };
                is_node(w.next()) && w.next() == Some("->") && is_node(w.next())
            })
            .count();
        prop_assert_eq!(edge_lines, b.dag.edge_count(), "edges in:\n{}", canon);
        Ok(())
    });
    let skipped = skipped.into_inner();
    if skipped > 0 {
        // Not a silent pass: say which check did not run.
        println!(
            "note: `dot` (Graphviz) is not on PATH: the DOT parse check was skipped in {skipped} \
             of {DOT_CASES} cases"
        );
    }
}

#[test]
fn update_pairing_follows_nodes_and_edges_not_the_order_edges_were_added_in() {
    let (env, rec) = Env::new();
    let rec = std::cell::RefCell::new(rec);
    let extra = (
        prop::collection::vec(any::<Index>(), 0..8),
        any::<Index>(),
        any::<Index>(),
    );
    let result = runner(CASES).run(&(case(), extra), |(steps, (shuffle, x, y))| {
        let rec = &mut *rec.borrow_mut();
        let first = build(&env, &steps, true)?;
        check_lowering(&first, rec)?;
        let calls: Vec<RecordedCall> = rec.calls().to_vec();

        // The same steps, then the first DAG's edges in shuffled order.
        let mut edges: Vec<(NodeId, NodeId)> = first.dag.edges().collect();
        for (i, k) in shuffle.iter().enumerate().take(edges.len()) {
            let j = k.index(edges.len() - i) + i;
            edges.swap(i, j);
        }
        let mut second = build(&env, &steps, false)?;
        for &(a, z) in &edges {
            second
                .dag
                .add_dependency(a, z)
                .map_err(|e| TestCaseError::fail(format!("a DAG's edges close no cycle: {e}")))?;
            second.model.edges.insert((a, z));
        }
        let (d1, d2) = (&first.dag, &second.dag);
        prop_assert_eq!(
            d1.node_ids().collect::<Vec<_>>(),
            d2.node_ids().collect::<Vec<_>>()
        );
        prop_assert_eq!(d1.edge_serials(), d2.edge_serials());
        prop_assert_eq!(d1.topological_order(), d2.topological_order());
        check_lowering(&second, rec)?;
        prop_assert_eq!(&calls[..], rec.calls(), "the same calls in the same order");
        prop_assert!(check_same_topology(d1, d2).is_ok(), "paired");
        prop_assert!(check_same_topology(d2, d1).is_ok(), "paired");

        // One edge more (when some pair of nodes takes one), else one edge less.
        let live: Vec<NodeId> = second.model.live.iter().copied().collect();
        let mut third = build(&env, &steps, false)?;
        let mut changed = false;
        if !live.is_empty() {
            let (a, z) = (live[x.index(live.len())], live[y.index(live.len())]);
            if a != z && !second.model.reaches(z, a) && !second.model.edges.contains(&(a, z)) {
                edges.push((a, z));
                changed = true;
            }
        }
        if !changed && !edges.is_empty() {
            edges.remove(x.index(edges.len()));
            changed = true;
        }
        for &(a, z) in &edges {
            third.dag.add_dependency(a, z).unwrap();
        }
        if changed {
            let refused = |r: Result<()>| matches!(r, Err(Error::UpdateRefused { .. }));
            prop_assert!(refused(check_same_topology(d1, &third.dag)), "edges differ");
            prop_assert!(refused(check_same_topology(&third.dag, d1)), "edges differ");
        }
        // One node more.
        let mut fourth = second.dag.clone();
        fourth.add_empty();
        prop_assert!(check_same_topology(d1, &fourth).is_err(), "a node more");
        prop_assert!(check_same_topology(&fourth, d1).is_err(), "a node less");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
