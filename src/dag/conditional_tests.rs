//! Host tests of conditional nodes (IF, IF/ELSE, WHILE, SWITCH): the builder's checks,
//! validation (CUDA's node kinds in bodies, named by path; handles used outside their DAG;
//! one handle per node), lowering through the recording backend (handles created first, the
//! handle written into the kernels that pass it, bodies lowered into their own graphs), DOT,
//! and the refusals of stream launches and `Exec` updates that would pass a placeholder.

use super::*;
use crate::device::DeviceLimits;
use crate::kernel::Kernel;
use crate::memory::DeviceBuffer;
use crate::{args, KernelArg, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

/// A kernel `(float*, cudaGraphConditionalHandle)` and a buffer.
fn setup(r: &mut RecordingBackend) -> (Kernel, DeviceBuffer<f32>) {
    (r.kernel("step", &[8, 8]), r.device_buffer::<f32>(256))
}

/// A body of one kernel node setting `h` from `x`.
fn body_setting(k: &Kernel, x: &DeviceBuffer<f32>, h: &crate::Conditional) -> Dag {
    let mut body = Dag::new();
    let n = body
        .add_kernel(k, LaunchConfig::new(1, 256), &args![x, h])
        .unwrap();
    body.set_name(n, "step");
    body
}

#[test]
fn a_while_lowers_its_handle_first_then_the_node_with_its_body_passing_the_handle() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let fill = dag.add_memset(&x, 0u32).unwrap();
    let w = dag.add_while(&h, &body_setting(&k, &x, &h)).unwrap();
    dag.set_name(w, "loop");
    dag.add_dependency(fill, w).unwrap();
    let handles = dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert_eq!(
        lines[0],
        "0 cudaGraphConditionalHandleCreate handle `handle#0` deps=[] default=1 \
         flags=assign_default handle=0xc0de00000000",
        "{t}"
    );
    assert!(
        lines[1].starts_with("1 cudaGraphAddNode memset `memset#0` deps=[]"),
        "{t}"
    );
    assert!(
        lines[2].starts_with(
            "2 cudaGraphAddNode conditional `loop` deps=[1] type=WHILE handle=0xc0de00000000 \
             size=1 body0=[cudaGraphAddKernelNode kernel `step` deps=[] "
        ),
        "{t}"
    );
    // The kernel in the body passes the handle of the graph (little-endian bytes), not the
    // DAG's placeholder.
    assert!(lines[2].contains("00000000dec00000"), "{t}");
    assert_eq!(handles[w.index()], Some(2));
    // The DAG keeps its placeholder.
    let Op::Conditional(c) = dag.node(w).unwrap().op() else {
        panic!("a conditional node")
    };
    let Op::Kernel(kn) = c.bodies()[0]
        .node(c.bodies()[0].find("step").unwrap())
        .unwrap()
        .op()
    else {
        panic!("a kernel node")
    };
    assert_eq!(kn.arg_bytes(1), &0u64.to_ne_bytes());
}

#[test]
fn an_if_reads_a_handle_a_kernel_before_it_sets() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let _unused = dag.conditional_handle(7); // declared, read by no node: not created
    let h = dag.conditional_handle(0);
    let decide = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    let mut then = Dag::new();
    then.add_memset(&x, 1u32).unwrap();
    let i = dag.add_if(&h, &then).unwrap();
    dag.add_dependency(decide, i).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(
        lines[0]
            .starts_with("0 cudaGraphConditionalHandleCreate handle `handle#1` deps=[] default=0"),
        "{t}"
    );
    // The top-level kernel passes the handle too (second argument).
    assert!(
        lines[1].starts_with("1 cudaGraphAddKernelNode kernel `kernel#0` deps=[]")
            && lines[1].contains("00000000dec00000"),
        "{t}"
    );
    assert!(
        lines[2].starts_with(
            "2 cudaGraphAddNode conditional `conditional#1` deps=[1] type=IF \
             handle=0xc0de00000000 size=1 body0=[cudaGraphAddNode memset `memset#0` deps=[]"
        ),
        "{t}"
    );
}

#[test]
fn if_else_and_switch_lower_one_body_graph_per_branch() {
    let mut r = rec();
    let (_, x) = setup(&mut r);
    let mut dag = Dag::new();
    let a = dag.conditional_handle(0);
    let b = dag.conditional_handle(2);
    let branch = |v: u32| {
        let mut d = Dag::new();
        d.add_memset(&x, v).unwrap();
        d
    };
    dag.add_if_else(&a, &branch(1), &branch(2)).unwrap();
    let cases = [branch(10), Dag::new(), branch(30)];
    dag.add_switch(&b, &cases).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4, "{t}");
    assert!(lines[1].contains("default=2"), "{t}");
    assert!(
        lines[2].contains("type=IF/ELSE handle=0xc0de00000000 size=2 body0=["),
        "{t}"
    );
    assert!(
        lines[2].contains("value=0x1 ") && lines[2].contains("value=0x2 "),
        "{t}"
    );
    assert!(
        lines[3].contains("type=SWITCH handle=0xc0de00000001 size=3 ")
            && lines[3].contains(" body1=[] body2=["),
        "{t}"
    );
}

#[test]
fn nested_conditionals_see_the_handles_of_the_graphs_around_them() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let outer = dag.conditional_handle(1);
    // The WHILE body holds an IF over a handle of its own, and a kernel setting the outer
    // handle.
    let mut body = Dag::new();
    let inner = body.conditional_handle(0);
    let set_inner = body
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &inner])
        .unwrap();
    let set_outer = body
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &outer])
        .unwrap();
    let mut then = Dag::new();
    // The innermost body passes the outer handle: two levels up.
    then.add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &outer])
        .unwrap();
    let i = body.add_if(&inner, &then).unwrap();
    body.chain(&[set_inner, i, set_outer]).unwrap();
    dag.add_while(&outer, &body).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 2, "{t}");
    let w = lines[1];
    // The body's handle is created on the body's graph (its own recording), first.
    assert!(
        w.contains("body0=[cudaGraphConditionalHandleCreate handle `handle#0` deps=[] default=0 flags=assign_default handle=0xc0de00000101"),
        "{t}"
    );
    // The kernel setting the inner handle passes it, the one setting the outer passes that.
    assert!(w.contains("01010000dec00000"), "{t}");
    assert_eq!(w.matches("00000000dec00000").count(), 2, "{t}");
    assert!(
        w.contains("type=IF handle=0xc0de00000101 size=1 body0=["),
        "{t}"
    );
}

#[test]
fn a_body_may_hold_only_cudas_kinds_and_the_offender_is_named_by_its_path() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let mut body = body_setting(&k, &x, &h);
    let host = body.add_host(|| {});
    body.set_name(host, "print");
    let w = dag.add_while(&h, &body).unwrap();
    dag.set_name(w, "loop");
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { node, problem })
            if node == "loop/body/print" && problem.contains("is a host node")),
        "{err}"
    );
    assert!(r.calls().is_empty(), "nothing lowered");
    // Through a child graph too, and for events.
    let mut child = Dag::new();
    let e = r.event();
    child.add_event_record(&e);
    let mut then = Dag::new();
    let c = then.add_child(&child);
    then.set_name(c, "sub");
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    dag.add_if(&h, &then).unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { node, problem })
            if node == "conditional#0/then/sub/record#0" && problem.contains("record node")),
        "{err}"
    );
    // Kernel, memcpy, memset, empty, child and conditional nodes pass.
    let mut ok = Dag::new();
    let h = ok.conditional_handle(0);
    let mut then = Dag::new();
    let y = r.device_buffer::<f32>(256);
    then.add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    then.add_copy(crate::dst(&y), crate::src(&x)).unwrap();
    then.add_memset(&y, 0u32).unwrap();
    then.add_empty();
    then.add_child(&Dag::new());
    let mut inner = Dag::new();
    let ih = inner.conditional_handle(0);
    inner.add_if(&ih, &Dag::new()).unwrap();
    then.add_child(&inner);
    ok.add_if(&h, &then).unwrap();
    ok.lower(&mut r).unwrap();
}

#[test]
fn a_handle_of_another_dag_is_refused_naming_the_node() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut other = Dag::new();
    let foreign = other.conditional_handle(0);
    // As a conditional node's handle: refused by the builder.
    let mut dag = Dag::new();
    let err = dag.add_if(&foreign, &Dag::new()).err().unwrap();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { node, problem })
            if node == "conditional#0" && problem.contains("another DAG")),
        "{err}"
    );
    assert_eq!(dag.node_count(), 0);
    // As a kernel argument: refused by validation, naming the kernel node.
    let h = dag.conditional_handle(0);
    let n = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &foreign])
        .unwrap();
    dag.set_name(n, "setter");
    dag.add_if(&h, &Dag::new()).unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgs { node: Some(node), problem, .. }
            if node == "setter" && problem.contains("argument 1") && problem.contains("another DAG")),
        "{err}"
    );
    // A handle the body's own DAG declared, used by the enclosing DAG's kernel: out of scope.
    let mut body = Dag::new();
    let inner = body.conditional_handle(0);
    body.add_if(&inner, &Dag::new()).unwrap();
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    dag.add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &inner])
        .unwrap();
    dag.add_while(&h, &body).unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgs { node: Some(node), .. } if node == "kernel#0"),
        "{err}"
    );
    // Through a child graph of a body: out of scope as well.
    let mut child = Dag::new();
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    child
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    let mut body = Dag::new();
    let c = body.add_child(&child);
    body.set_name(c, "sub");
    dag.add_while(&h, &body).unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgs { node: Some(node), .. }
            if node == "conditional#0/body/sub/kernel#0"),
        "{err}"
    );
    // A handle no conditional node reads, passed to a kernel: refused (never created).
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    dag.add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::KernelArgs { problem, .. } if problem.contains("no conditional node reads")),
        "{err}"
    );
}

#[test]
fn a_switch_needs_a_case_and_a_handle_serves_one_node() {
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let err = dag.add_switch(&h, &[]).err().unwrap();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { node, problem })
            if node == "conditional#0" && problem.contains("SWITCH node needs at least one case")),
        "{err}"
    );
    assert_eq!(dag.node_count(), 0);
    let first = dag.add_if(&h, &Dag::new()).unwrap();
    dag.set_name(first, "first");
    let second = dag.add_while(&h, &Dag::new()).unwrap();
    dag.set_name(second, "second");
    let err = dag.lower(&mut rec()).unwrap_err();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { node, problem })
            if node == "second" && problem.contains("`first` reads too")),
        "{err}"
    );
}

#[test]
fn a_body_that_is_a_copy_of_its_own_dag_is_refused() {
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let copy = dag.clone();
    dag.add_if(&h, &copy).unwrap();
    let err = dag.lower(&mut rec()).unwrap_err();
    assert!(
        matches!(&err, Error::Dag(DagError::WrongKind { problem, .. }) if problem.contains("copy of a DAG it is inside")),
        "{err}"
    );
}

#[test]
fn bodies_run_on_the_graphs_device_and_keep_their_buffers_alive() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let x = r.device_buffer::<f32>(16);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let mut then = Dag::new();
    let m = then.add_memset(&x, 0u32).unwrap();
    then.place_on(m, r.device_key(1)).unwrap();
    dag.add_if(&h, &then).unwrap();
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::Dag(DagError::Placement { node, .. }) if node == "conditional#0/then/memset#0"),
        "{err}"
    );
    // The DAG refers to the body's buffers (the Exec holds them).
    let mut n = 0;
    dag.for_each_allocation(&mut |a| {
        assert!(Arc::ptr_eq(a, &x.alloc));
        n += 1;
    });
    assert_eq!(n, 1);
}

#[test]
fn dot_draws_each_body_as_a_cluster_labelled_with_its_condition() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let s = dag.conditional_handle(0);
    let w = dag.add_while(&h, &body_setting(&k, &x, &h)).unwrap();
    dag.set_name(w, "loop");
    let cases = [Dag::new(), body_setting(&k, &x, &h)];
    let sw = dag.add_switch(&s, &cases).unwrap();
    dag.add_dependency(w, sw).unwrap();
    let dot = dag.to_dot();
    assert!(
        dot.contains("n0 [label=\"loop\\nWHILE handle #0 (default 1)\", shape=diamond"),
        "{dot}"
    );
    assert!(dot.contains("  subgraph cluster_n0_0_ {\n"), "{dot}");
    assert!(
        dot.contains("label=\"body: while condition != 0 (handle #0)\";"),
        "{dot}"
    );
    assert!(
        dot.contains("    n0_0_0 [label=\"step\\nkernel step"),
        "{dot}"
    );
    assert!(
        dot.contains("  n0 -> n0_0_0 [style=dashed, arrowhead=empty];"),
        "{dot}"
    );
    assert!(
        dot.contains("label=\"case 0: case condition == 0 (handle #1)\";"),
        "{dot}"
    );
    assert!(dot.contains("    n1_0_empty [label=\"(empty)\""), "{dot}");
    assert!(dot.contains("  n1 -> n1_1_0 [style=dashed"), "{dot}");
    assert!(dot.contains("  n0 -> n1;\n"), "{dot}");
}

#[test]
#[cfg_attr(miri, ignore = "spawns Graphviz `dot`: Miri cannot run a process")]
fn dot_with_nested_clusters_renders_with_graphviz() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let mut body = body_setting(&k, &x, &h);
    let inner = body.conditional_handle(0);
    let mut then = Dag::new();
    then.add_memset(&x, 0u32).unwrap();
    body.add_if_else(&inner, &then, &Dag::new()).unwrap();
    dag.add_while(&h, &body).unwrap();
    let dot = dag.to_dot();
    assert!(dot.contains("subgraph cluster_n0_0_1_0_ {"), "{dot}");
    let Some((svg, stderr)) = super::tests::graphviz_svg(&dot) else {
        return;
    };
    assert!(stderr.is_empty(), "{stderr}\n{dot}");
    assert!(svg.contains("while condition != 0"), "{svg}");
}

#[test]
fn a_handle_is_not_a_stream_launch_argument_and_knows_its_default() {
    let mut dag = Dag::new();
    let h = dag.conditional_handle(5);
    assert_eq!(h.default_value(), 5);
    assert_eq!(h.index(), 0);
    let a = KernelArg::from(&h);
    assert_eq!(a.size(), 8);
    assert_eq!(a.as_conditional(), Some(&h));
    let r = rec();
    let k = r.kernel("step", &[8]);
    let err = k.check_args(&[a]).unwrap_err();
    assert!(err.to_string().contains("conditional handle"), "{err}");
}

#[test]
fn dag_set_kernel_args_keeps_track_of_the_handles_passed() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let n = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    dag.add_if(&h, &Dag::new()).unwrap();
    dag.lower(&mut r).unwrap();
    assert!(r.transcript().contains("00000000dec00000"));
    // A plain value instead: lowered as given.
    dag.set_kernel_args(n, &args![&x, 42u64]).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let last_kernel = t
        .lines()
        .rev()
        .find(|l| l.contains("kernel `kernel#0`"))
        .unwrap();
    assert!(last_kernel.contains("2a00000000000000"), "{t}");
}

#[test]
fn an_execs_dag_holds_its_graphs_handles_and_its_updates_keep_them() {
    let mut r = rec();
    let (k, x) = setup(&mut r);
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    let n = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, &h])
        .unwrap();
    dag.add_if(&h, &Dag::new()).unwrap();
    // What instantiation does with the handles lowering created.
    let mut held = dag.clone();
    nodes::conditional::set_handle_values(&mut held, &[(0, 0xabcd)]);
    let Op::Kernel(kn) = held.node(n).unwrap().op() else {
        panic!("a kernel node")
    };
    assert_eq!(kn.arg_bytes(1), &0xabcdu64.to_ne_bytes());
    let Op::Kernel(kn) = dag.node(n).unwrap().op() else {
        panic!("a kernel node")
    };
    assert_eq!(
        kn.arg_bytes(1),
        &0u64.to_ne_bytes(),
        "the original keeps its placeholder"
    );
    // An Exec's update may change the other argument, not the handle, nor pass one.
    let c = &held.conditionals;
    let value = KernelArg::from(7u64);
    let handle = KernelArg::from(&h);
    assert!(c
        .exec_update_problem(n, [(0, &value)].into_iter())
        .is_none());
    let p = c.exec_update_problem(n, [(1, &value)].into_iter()).unwrap();
    assert!(p.contains("argument 1 passes a conditional handle"), "{p}");
    let p = c
        .exec_update_problem(n, [(0, &handle)].into_iter())
        .unwrap();
    assert!(p.contains("argument 0 is a conditional handle"), "{p}");
}
