//! Host tests of programmatic dependent launch edges (issue 31): every rule of where one is
//! allowed (builder and validation, both nodes named), lowering's edge data, DOT, the update
//! check and what the race check and inference make of them.

use super::exec::check_same_topology;
use super::tests::graphviz_svg;
use super::*;
use crate::device::DeviceLimits;
use crate::{args, In, LaunchConfig, Out};

fn one() -> LaunchConfig {
    LaunchConfig::new(1, 32)
}

/// The `(before, after, problem)` of a refused programmatic edge (panics on anything else).
fn refusal(e: Error) -> (String, String, String) {
    match e {
        Error::Dag(DagError::Programmatic {
            before,
            after,
            problem,
        }) => (before, after, problem),
        other => panic!("not a programmatic-edge refusal: {other:?}"),
    }
}

/// Three kernels `a`, `b`, `c` of one recording device, and a memset `m`.
fn three(r: &mut RecordingBackend) -> (Dag, [NodeId; 4]) {
    let x = r.device_buffer::<f32>(32);
    let k = r.kernel("step", &[8]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, one(), &args![&x]).unwrap();
    let b = dag.add_kernel(&k, one(), &args![&x]).unwrap();
    let c = dag.add_kernel(&k, one(), &args![&x]).unwrap();
    let m = dag.add_memset(&x, 0u32).unwrap();
    dag.set_name(a, "a");
    dag.set_name(b, "b");
    dag.set_name(c, "c");
    dag.set_name(m, "m");
    (dag, [a, b, c, m])
}

#[test]
fn lowering_passes_edge_data_for_programmatic_dependencies_only() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, c, m]) = three(&mut r);
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.add_programmatic_dependency(b, c, ProgrammaticPort::LaunchCompletion)
        .unwrap();
    // `c` also waits for the memset through a plain edge: one edge datum per dependency.
    dag.add_dependency(m, c).unwrap();
    assert_eq!(
        dag.graph[dag.graph.find_edge(a.idx, b.idx).unwrap()].programmatic(),
        Some(ProgrammaticPort::Programmatic)
    );
    dag.lower(&mut r).unwrap();
    let calls = r.calls();
    let by_name = |n: &str| calls.iter().find(|c| c.name == n).unwrap();
    assert_eq!(by_name("a").function, "cudaGraphAddKernelNode");
    assert!(!by_name("a").params.contains("edge("));
    assert_eq!(by_name("b").function, "cudaGraphAddNode");
    assert!(
        by_name("b")
            .params
            .ends_with(" edge(from_port=1 to_port=0 type=1)"),
        "{}",
        by_name("b").params
    );
    // Dependencies by serial: a's (then b), m's last; b's edge is launch-completion, m's plain.
    let cc = by_name("c");
    assert_eq!(cc.function, "cudaGraphAddNode");
    assert!(
        cc.params
            .ends_with(" edge(from_port=2 to_port=0 type=1) edge(from_port=0 to_port=0 type=0)"),
        "{}",
        cc.params
    );
    assert_eq!(by_name("m").function, "cudaGraphAddNode");
    assert!(!by_name("m").params.contains("edge("));
}

#[test]
fn a_plain_dag_lowers_as_before() {
    // No programmatic edge: kernels keep the kernel-specific call, no edge data.
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, c, _]) = three(&mut r);
    dag.chain(&[a, b, c]).unwrap();
    dag.lower(&mut r).unwrap();
    for call in r.calls().iter().filter(|c| c.kind == "kernel") {
        assert_eq!(call.function, "cudaGraphAddKernelNode");
        assert!(!call.params.contains("edge("));
    }
}

#[test]
fn only_kernel_nodes_are_joined() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, _, _, m]) = three(&mut r);
    let (before, after, problem) = refusal(
        dag.add_programmatic_dependency(a, m, ProgrammaticPort::Programmatic)
            .unwrap_err(),
    );
    assert_eq!((before.as_str(), after.as_str()), ("a", "m"));
    assert!(
        problem.contains("`m` is a memset node") && problem.contains("two kernel nodes"),
        "{problem}"
    );
    let e = dag.add_empty();
    let (before, _, problem) = refusal(
        dag.add_programmatic_dependency(e, a, ProgrammaticPort::LaunchCompletion)
            .unwrap_err(),
    );
    assert_eq!(before, "empty#4");
    assert!(problem.contains("an empty node"), "{problem}");
    assert_eq!(dag.edge_count(), 0, "nothing added");
}

#[test]
fn kernels_of_two_devices_are_refused_when_added_and_when_validated() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let k0 = r.kernel_on(0, "step", &[]);
    let k1 = r.kernel_on(1, "step", &[]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k0, one(), &[]).unwrap();
    let b = dag.add_kernel(&k1, one(), &[]).unwrap();
    dag.place_on(b, r.device_key(1)).unwrap();
    // Placed on device 0 explicitly: two devices, seen when added.
    dag.place_on(a, r.device_key(0)).unwrap();
    let (before, after, problem) = refusal(
        dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
            .unwrap_err(),
    );
    assert_eq!((before.as_str(), after.as_str()), ("kernel#0", "kernel#1"));
    assert!(problem.contains("two devices"), "{problem}");
    // Unplaced `a` runs on the home device: only validation knows which that is.
    dag.unplace(a).unwrap();
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    let (before, after, problem) = refusal(dag.lower(&mut r).unwrap_err());
    assert_eq!((before.as_str(), after.as_str()), ("kernel#0", "kernel#1"));
    assert!(problem.contains("run on two devices"), "{problem}");
    // Both on device 1: one device, lowered.
    let k1b = r.kernel_on(1, "step", &[]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k1, one(), &[]).unwrap();
    let b = dag.add_kernel(&k1b, one(), &[]).unwrap();
    dag.place_on(a, r.device_key(1)).unwrap();
    dag.place_on(b, r.device_key(1)).unwrap();
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.lower(&mut r).unwrap();
}

#[test]
fn devices_before_hopper_are_refused() {
    let ampere = DeviceLimits {
        compute_capability: (8, 0),
        ..DeviceLimits::hopper()
    };
    let mut r = RecordingBackend::new(ampere);
    let (mut dag, [a, b, _, _]) = three(&mut r);
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    let (before, after, problem) = refusal(dag.lower(&mut r).unwrap_err());
    assert_eq!((before.as_str(), after.as_str()), ("a", "b"));
    assert!(problem.contains("compute capability 8.0"), "{problem}");
}

#[test]
fn an_existing_edge_of_another_kind_is_refused_and_the_same_edge_is_kept() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, c, _]) = three(&mut r);
    dag.add_dependency(a, b).unwrap();
    let (_, _, problem) = refusal(
        dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
            .unwrap_err(),
    );
    assert!(problem.contains("plain edge"), "{problem}");
    dag.add_programmatic_dependency(b, c, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.add_programmatic_dependency(b, c, ProgrammaticPort::Programmatic)
        .unwrap();
    assert_eq!(dag.edge_count(), 2);
    let (_, _, problem) = refusal(
        dag.add_programmatic_dependency(b, c, ProgrammaticPort::LaunchCompletion)
            .unwrap_err(),
    );
    assert!(problem.contains("of the programmatic port"), "{problem}");
    // A plain edge over a programmatic one changes nothing: it stays programmatic.
    dag.add_dependency(b, c).unwrap();
    assert_eq!(
        dag.graph[dag.graph.find_edge(b.idx, c.idx).unwrap()].programmatic(),
        Some(ProgrammaticPort::Programmatic)
    );
}

#[test]
fn cycles_and_self_loops_are_refused_as_for_plain_edges() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, _, _]) = three(&mut r);
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    let e = dag
        .add_programmatic_dependency(b, a, ProgrammaticPort::Programmatic)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Dag(DagError::Cycle { nodes }) if nodes == &["b", "a", "b"]),
        "{e:?}"
    );
    let e = dag
        .add_programmatic_dependency(a, a, ProgrammaticPort::Programmatic)
        .unwrap_err();
    assert!(matches!(e, Error::Dag(DagError::Cycle { .. })), "{e:?}");
    assert_eq!(dag.edge_count(), 1);
}

#[test]
fn child_graphs_keep_their_programmatic_edges() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut child, [a, b, _, _]) = three(&mut r);
    child
        .add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    let mut dag = Dag::new();
    dag.add_child(&child);
    dag.lower(&mut r).unwrap();
    // The child's calls, as the recording summarises them: `b` through the call that takes
    // edge data, `a` through the kernel-specific one.
    let p = &r.calls()[0].params;
    assert!(
        p.contains("cudaGraphAddKernelNode kernel `a`")
            && p.contains("cudaGraphAddNode kernel `b`"),
        "{p}"
    );
}

#[test]
fn updates_refuse_an_edge_of_another_kind() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, c, _]) = three(&mut r);
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.add_dependency(b, c).unwrap();
    // The same DAG (a clone: same serials) pairs.
    check_same_topology(&dag, &dag.clone()).unwrap();
    // The same edges, one of another kind: refused, naming the edge.
    let mut plain = dag.clone();
    let e = plain.graph.find_edge(a.idx, b.idx).unwrap();
    plain.graph[e] = Dependency::default();
    let Error::UpdateRefused { node, reason } = check_same_topology(&dag, &plain).unwrap_err()
    else {
        panic!("not an update refusal")
    };
    assert_eq!(node.as_deref(), Some("b"));
    assert!(reason.contains("`a` -> `b`"), "{reason}");
    // Another port: refused too.
    let mut other = dag.clone();
    other.graph[e].programmatic = Some(ProgrammaticPort::LaunchCompletion);
    let Error::UpdateRefused { reason, .. } = check_same_topology(&dag, &other).unwrap_err() else {
        panic!("not an update refusal")
    };
    assert!(reason.contains("launch completion"), "{reason}");
    // A plain edge made programmatic.
    let mut more = dag.clone();
    let e = more.graph.find_edge(b.idx, c.idx).unwrap();
    more.graph[e].programmatic = Some(ProgrammaticPort::Programmatic);
    more.programmatic_edges += 1;
    let Error::UpdateRefused { reason, .. } = check_same_topology(&dag, &more).unwrap_err() else {
        panic!("not an update refusal")
    };
    assert!(reason.contains("`b` -> `c` is programmatic"), "{reason}");
}

#[test]
fn dot_draws_programmatic_edges_with_their_port() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let (mut dag, [a, b, c, _]) = three(&mut r);
    dag.add_programmatic_dependency(a, b, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.add_programmatic_dependency(b, c, ProgrammaticPort::LaunchCompletion)
        .unwrap();
    let dot = dag.to_dot();
    assert!(
        dot.contains("n0 -> n1 [style=bold, color=\"#7048e8\", label=\"programmatic\"];"),
        "{dot}"
    );
    assert!(
        dot.contains("n1 -> n2 [style=bold, color=\"#7048e8\", label=\"launch completion\"];"),
        "{dot}"
    );
    if let Some((svg, _)) = graphviz_svg(&dot) {
        assert!(svg.contains("launch completion"));
    }
}

#[test]
fn races_and_inference_count_a_programmatic_edge_as_ordering() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let x = r.device_buffer::<f32>(32);
    let k = r.kernel("step", &[8]);
    let mut dag = Dag::new();
    let w = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    let rd = dag.add_kernel(&k, one(), &args![In(&x)]).unwrap();
    let w2 = dag.add_kernel(&k, one(), &args![Out(&x)]).unwrap();
    dag.add_programmatic_dependency(w, rd, ProgrammaticPort::Programmatic)
        .unwrap();
    let races: Vec<_> = dag.races().iter().map(|r| (r.first, r.second)).collect();
    assert_eq!(races, vec![(w, w2), (rd, w2)], "not `w`/`rd`");
    let added = dag.infer_dependencies();
    assert_eq!(
        added
            .iter()
            .map(|e| (e.before, e.after))
            .collect::<Vec<_>>(),
        vec![(rd, w2)],
        "w -> rd is ordered by the programmatic edge; w -> w2 is implied through it"
    );
    assert!(dag.races().is_empty());
}
