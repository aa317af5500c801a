//! Host tests of device-side graph launch: CUDA's rules for a graph instantiated for device
//! launch (node kinds through child graphs, at least one node doing work, one device), each
//! error naming the node; a kernel node passing a [`DeviceGraph`]: its handle in the lowered
//! arguments, the DAG keeping the graph alive (and letting it go when the argument is
//! replaced), the device check, child graphs, the refusals of stream launches and `Exec`
//! updates, and DOT.

use super::nodes::device_launch::check_device_launch;
use super::*;
use crate::device::DeviceLimits;
use crate::kernel::DeviceGraph;
use crate::{args, KernelArg, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

fn validate(dag: &Dag, r: &RecordingBackend) -> Result<()> {
    use crate::dag::nodes::backend::sealed::Lower;
    dag.validate_on(&ValidationTarget::new(r.key(), r.limits(), r, true))
}

fn key(r: &RecordingBackend) -> crate::device::DeviceKey {
    use crate::dag::nodes::backend::sealed::Lower;
    r.key()
}

fn hex_le(v: u64) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// The node a `WrongKind` error names and its problem.
fn wrong_kind(e: Error) -> (String, String) {
    match e {
        Error::Dag(DagError::WrongKind { node, problem }) => (node, problem),
        other => panic!("not a wrong-kind error: {other}"),
    }
}

#[test]
fn a_device_launch_graph_holds_only_kernel_copy_memset_and_child_nodes() {
    let mut r = rec();
    let k = r.kernel("k", &[8]);
    let x = r.device_buffer::<f32>(64);
    let y = r.device_buffer::<f32>(64);
    let mut inner = Dag::new();
    inner.add_memset(&x, 0u32).unwrap();
    inner.add_copy(dst(&y), src(&x)).unwrap();
    let mut dag = Dag::new();
    dag.add_kernel(&k, LaunchConfig::new(1, 64), &args![&x])
        .unwrap();
    dag.add_child(&inner);
    check_device_launch(&dag, key(&r)).unwrap();
    // A host node.
    let mut bad = dag.clone();
    let h = bad.add_host(|| {});
    bad.set_name(h, "callback");
    let (node, problem) = wrong_kind(check_device_launch(&bad, key(&r)).unwrap_err());
    assert_eq!(node, "callback");
    assert!(problem.contains("is a host node"), "{problem}");
    // An empty node inside a child graph, named by its path.
    let mut inner2 = inner.clone();
    inner2.add_empty();
    let mut bad = Dag::new();
    let c = bad.add_child(&inner2);
    bad.set_name(c, "sub");
    let (node, problem) = wrong_kind(check_device_launch(&bad, key(&r)).unwrap_err());
    assert_eq!(node, "sub/empty#2");
    assert!(problem.contains("through child graphs too"), "{problem}");
    // Nothing that works: a child of an empty DAG.
    let mut idle = Dag::new();
    idle.add_child(&Dag::new());
    match check_device_launch(&idle, key(&r)).unwrap_err() {
        Error::BadOptions { problem, .. } => {
            assert!(problem.contains("no kernel, memcpy or memset"), "{problem}")
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_device_launch_graph_runs_on_one_device() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let x = r.device_buffer::<f32>(64);
    let mut dag = Dag::new();
    let m = dag.add_memset(&x, 0u32).unwrap();
    // Placed on the home device: fine.
    dag.place_on(m, r.device_key(0)).unwrap();
    check_device_launch(&dag, key(&r)).unwrap();
    dag.place_on(m, r.device_key(1)).unwrap();
    match check_device_launch(&dag, key(&r)).unwrap_err() {
        Error::Dag(DagError::Placement { node, problem }) => {
            assert_eq!(node, "memset#0");
            assert!(problem.contains("device launch"), "{problem}");
        }
        other => panic!("{other}"),
    }
}

/// A graph launching `g`: `launch(cudaGraphExec_t g, int* flag)`.
fn launcher(r: &mut RecordingBackend, g: &DeviceGraph) -> (Dag, NodeId) {
    let k = r.kernel("launch", &[8, 8]);
    let flag = r.device_buffer::<i32>(1);
    let mut dag = Dag::new();
    let n = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![g, &flag])
        .unwrap();
    dag.set_name(n, "launch");
    (dag, n)
}

#[test]
fn a_kernel_passes_the_graph_handle_and_its_dag_keeps_the_graph() {
    let mut r = rec();
    let out = r.device_buffer::<f32>(16);
    let g = DeviceGraph::stand_in(key(&r), 0x9a9a_0000, vec![out.alloc.clone()]);
    assert_eq!(g.holders(), 1);
    let (mut dag, n) = launcher(&mut r, &g);
    assert_eq!(g.holders(), 2, "the DAG keeps the graph");
    let copy = dag.clone();
    assert_eq!(g.holders(), 3, "and so does a copy");
    drop(copy);
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    assert!(
        t.contains(&format!("args=[{},", hex_le(0x9a9a_0000))),
        "the graph's handle is the argument: {t}"
    );
    // The Exec's DAG counts the device graph's buffers as its own.
    let mut seen = Vec::new();
    dag.device_graphs
        .for_each_allocation(&mut |a| seen.push(a.ptr));
    assert_eq!(seen, vec![out.alloc.ptr]);
    // Replacing the argument lets the graph go.
    let flag = r.device_buffer::<i32>(1);
    dag.set_kernel_args(n, &args![0u64, &flag]).unwrap();
    assert_eq!(g.holders(), 1);
    assert!(dag.device_graph_user().is_none());
}

#[test]
fn a_device_graph_of_another_device_or_inside_a_child_graph_is_refused() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let g = DeviceGraph::stand_in(r.device_key(1), 0x1000, Vec::new());
    let (dag, _) = launcher(&mut r, &g);
    match validate(&dag, &r).unwrap_err() {
        Error::WrongDevice { node, problem } => {
            assert_eq!(node.as_deref(), Some("launch"));
            assert!(
                problem.contains("launches graphs of its own device"),
                "{problem}"
            );
        }
        other => panic!("{other}"),
    }
    let g = DeviceGraph::stand_in(r.device_key(0), 0x1000, Vec::new());
    let (dag, _) = launcher(&mut r, &g);
    validate(&dag, &r).unwrap();
    let mut parent = Dag::new();
    let c = parent.add_child(&dag);
    parent.set_name(c, "inner");
    let (node, problem) = wrong_kind(validate(&parent, &r).unwrap_err());
    assert_eq!(node, "inner/launch");
    assert!(problem.contains("inside a child graph"), "{problem}");
}

#[test]
fn stream_launches_and_exec_updates_cannot_pass_or_replace_a_device_graph() {
    let mut r = rec();
    let g = DeviceGraph::stand_in(key(&r), 0x1000, Vec::new());
    let (dag, n) = launcher(&mut r, &g);
    let k = r.kernel("launch", &[8, 8]);
    let flag = r.device_buffer::<i32>(1);
    let p = k
        .args_problem(&[KernelArg::from(&g), KernelArg::from(&flag)])
        .unwrap();
    assert!(p.contains("is a device graph"), "{p}");
    let d = &dag.device_graphs;
    let value = KernelArg::from(&flag);
    let graph = KernelArg::from(&g);
    assert!(d
        .exec_update_problem(n, [(1, &value)].into_iter())
        .is_none());
    let p = d.exec_update_problem(n, [(0, &value)].into_iter()).unwrap();
    assert!(p.contains("cannot replace"), "{p}");
    let p = d.exec_update_problem(n, [(1, &graph)].into_iter()).unwrap();
    assert!(p.contains("is a device graph"), "{p}");
    assert_eq!(dag.device_graph_user().as_deref(), Some("launch"));
}

#[test]
fn dot_shows_the_kernel_launching_a_device_graph() {
    let mut r = rec();
    let g = DeviceGraph::stand_in(key(&r), 0xabc0, Vec::new());
    let (dag, _) = launcher(&mut r, &g);
    let dot = dag.to_dot();
    assert!(
        dot.contains("launches device graph 0xabc0 (argument 0)"),
        "{dot}"
    );
    assert!(
        dot.contains(super::nodes::device_launch::DOT_COLOR),
        "{dot}"
    );
    if let Some((_, stderr)) = super::tests::graphviz_svg(&dot) {
        assert!(stderr.is_empty(), "{stderr}\n{dot}");
    }
}
