//! Host tests of graph memory nodes: the lowering transcript (the allocation's address written
//! into the kernels, fills and free that use it), every validation rule with its error naming
//! the node (a use outside the span, a free without an allocation, a double free, a buffer of
//! another DAG, memory nodes in child graphs and bodies, placement), the instantiation check of
//! unfreed allocations, the refusals of stream launches and `Exec` updates, and DOT.

use super::*;
use crate::device::DeviceLimits;
use crate::kernel::Kernel;
use crate::memory::DeviceBuffer;
use crate::{args, GraphBuffer, KernelArg, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

/// A kernel `(float* scratch, float* out)` and an ordinary buffer.
fn setup(r: &mut RecordingBackend) -> (Kernel, DeviceBuffer<f32>) {
    (r.kernel("reduce", &[8, 8]), r.device_buffer::<f32>(256))
}

/// alloc -> fill -> kernel -> free, named; the buffer.
struct Scratch {
    dag: Dag,
    alloc: NodeId,
    fill: NodeId,
    kernel: NodeId,
    free: NodeId,
    buf: GraphBuffer<f32>,
}

fn scratch(k: &Kernel, out: &DeviceBuffer<f32>) -> Scratch {
    let mut dag = Dag::new();
    let (alloc, buf) = dag.add_alloc::<f32>(1024).unwrap();
    dag.set_name(alloc, "scratch");
    let fill = dag.add_graph_memset(&buf, 0u32).unwrap();
    let kernel = dag
        .add_kernel(k, LaunchConfig::new(4, 256), &args![&buf, out])
        .unwrap();
    dag.set_name(kernel, "reduce");
    let free = dag.add_free(&buf).unwrap();
    dag.chain(&[alloc, fill, kernel, free]).unwrap();
    Scratch {
        dag,
        alloc,
        fill,
        kernel,
        free,
        buf,
    }
}

/// The node an error names and its problem, for a `DagError::GraphMemory`.
fn graph_memory_error(e: Error) -> (String, String) {
    match e {
        Error::Dag(DagError::GraphMemory { node, problem }) => (node, problem),
        other => panic!("not a graph-memory error: {other}"),
    }
}

fn validate(dag: &Dag, r: &RecordingBackend) -> Result<()> {
    use crate::dag::nodes::backend::sealed::Lower;
    dag.validate_on(&ValidationTarget::new(r.key(), r.limits(), r, true))
}

#[test]
fn lowering_writes_the_allocations_address_into_its_fill_kernel_and_free() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let s = scratch(&k, &out);
    s.dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 4, "{t}");
    assert_eq!(
        lines[0],
        "0 cudaGraphAddNode mem_alloc `scratch` deps=[] graph_buffer=#0 bytes=4096 \
         location=device dptr=0x6a0000000000",
        "{t}"
    );
    assert!(
        lines[1].starts_with(
            "1 cudaGraphAddNode memset `memset#1` deps=[0] dst=0x6a0000000000 value=0x0 \
             element_size=4 width=1024 height=1"
        ),
        "{t}"
    );
    // The kernel's first argument is the allocation's address (little-endian bytes), the
    // second the ordinary buffer's.
    let out_addr = hex_le(out.alloc.ptr);
    assert_eq!(
        lines[2],
        format!(
            "2 cudaGraphAddKernelNode kernel `reduce` deps=[1] kernel=reduce grid=(4,1,1) \
             block=(256,1,1) smem=0 args=[00000000006a0000,{out_addr}]"
        ),
        "{t}"
    );
    assert_eq!(
        lines[3], "3 cudaGraphAddNode mem_free `free#3` deps=[2] dptr=0x6a0000000000",
        "{t}"
    );
    // The DAG keeps its placeholders.
    let Op::Kernel(kn) = s.dag.node(s.kernel).unwrap().op() else {
        panic!("a kernel node")
    };
    assert_eq!(kn.arg_bytes(0), &0u64.to_ne_bytes());
    assert_eq!(s.buf.len(), 1024);
    assert_eq!(s.buf.size_bytes(), 4096);
    assert_eq!(s.buf.index(), 0);
}

fn hex_le(v: u64) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn two_allocations_get_two_addresses_and_each_user_its_own() {
    let mut r = rec();
    let k = r.kernel("pair", &[8, 8]);
    let mut dag = Dag::new();
    let (a, x) = dag.add_alloc::<u8>(100).unwrap();
    let (b, y) = dag.add_alloc::<f64>(3).unwrap();
    let kn = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&y, &x])
        .unwrap();
    let fx = dag.add_free(&x).unwrap();
    let fy = dag.add_free(&y).unwrap();
    dag.fan_in(&[a, b], kn).unwrap();
    dag.fan_out(kn, &[fx, fy]).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    // 100 bytes round up to 256: the second allocation starts 256 bytes on.
    assert!(
        t.contains("graph_buffer=#1 bytes=24 location=device dptr=0x6a0000000100"),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "args=[{},{}]",
            hex_le(0x6a00_0000_0100),
            hex_le(0x6a00_0000_0000)
        )),
        "{t}"
    );
    assert!(
        t.contains("mem_free `free#3` deps=[2] dptr=0x6a0000000000"),
        "{t}"
    );
    assert!(
        t.contains("mem_free `free#4` deps=[2] dptr=0x6a0000000100"),
        "{t}"
    );
}

#[test]
fn a_use_outside_the_span_is_refused_naming_the_node() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    // Not ordered after the allocation.
    let mut dag = Dag::new();
    let (_, buf) = dag.add_alloc::<f32>(16).unwrap();
    let kn = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&buf, &out])
        .unwrap();
    dag.set_name(kn, "early");
    let (node, problem) = graph_memory_error(validate(&dag, &r).unwrap_err());
    assert_eq!(node, "early");
    assert!(
        problem.contains(
            "argument 0 passes graph buffer #0 but is not ordered after its allocation `alloc#0`"
        ),
        "{problem}"
    );
    assert!(dag.lower(&mut r).is_err(), "lowering validates first");

    // After the free.
    let mut s = scratch(&k, &out);
    let late = s.dag.add_graph_memset(&s.buf, 1u32).unwrap();
    s.dag.set_name(late, "late fill");
    s.dag.add_dependency(s.free, late).unwrap();
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "late fill");
    assert!(
        problem.contains("fills graph buffer #0 after its free `free#3`"),
        "{problem}"
    );

    // Ordered after the allocation but not before the free: it could run after it.
    let mut s = scratch(&k, &out);
    let side = s
        .dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&out, &s.buf])
        .unwrap();
    s.dag.add_dependency(s.alloc, side).unwrap();
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "kernel#4");
    assert!(
        problem.contains(
            "argument 1 passes graph buffer #0 but is not ordered before its free `free#3`"
        ),
        "{problem}"
    );
    // Ordering it before the free makes the DAG valid.
    s.dag.add_dependency(side, s.free).unwrap();
    validate(&s.dag, &r).unwrap();

    // A free not ordered after its allocation.
    let mut dag = Dag::new();
    let (_, buf) = dag.add_alloc::<f32>(16).unwrap();
    let f = dag.add_free(&buf).unwrap();
    dag.set_name(f, "hasty free");
    let (node, problem) = graph_memory_error(validate(&dag, &r).unwrap_err());
    assert_eq!(node, "hasty free");
    assert!(
        problem.contains("is not ordered after its allocation"),
        "{problem}"
    );
}

#[test]
fn a_free_without_an_allocation_and_a_double_free_are_refused() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    // Double free: the builder refuses the second, naming it and the first.
    let mut s = scratch(&k, &out);
    let err = s.dag.add_free(&s.buf).unwrap_err();
    let (node, problem) = graph_memory_error(err);
    assert_eq!(node, "free#4");
    assert!(
        problem.contains("which `free#3` frees already"),
        "{problem}"
    );
    // Validation too (a copy of the free node pushed past the builder).
    let op = s.dag.node(s.free).unwrap().op().clone();
    let second = s.dag.push(op);
    s.dag.add_dependency(s.kernel, second).unwrap();
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "free#4");
    assert!(problem.contains("which `free#3` frees too"), "{problem}");

    // A free whose allocation node was removed: refused by the builder and by validation.
    let mut s = scratch(&k, &out);
    s.dag.remove(s.alloc).unwrap();
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "free#3");
    assert!(
        problem.contains("whose allocation node was removed"),
        "{problem}"
    );
    s.dag.remove(s.free).unwrap();
    let (node, problem) = graph_memory_error(s.dag.add_free(&s.buf).unwrap_err());
    assert_eq!(node, "free#4");
    assert!(
        problem.contains("whose allocation node was removed"),
        "{problem}"
    );
    // Its users too.
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "memset#1");
    assert!(
        problem.contains("whose allocation node was removed"),
        "{problem}"
    );
}

#[test]
fn a_buffer_of_another_dag_is_refused_naming_the_node() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let s = scratch(&k, &out);
    let mut other = Dag::new();
    // The builders that check it at once.
    let (node, problem) = graph_memory_error(other.add_free(&s.buf).unwrap_err());
    assert_eq!(node, "free#0");
    assert!(
        problem.contains("frees graph buffer #0 of another DAG"),
        "{problem}"
    );
    let (node, problem) = graph_memory_error(other.add_graph_memset(&s.buf, 0u8).unwrap_err());
    assert_eq!(node, "memset#0");
    assert!(
        problem.contains("fills graph buffer #0 of another DAG"),
        "{problem}"
    );
    // A kernel argument: validation.
    let kn = other
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&s.buf, &out])
        .unwrap();
    other.set_name(kn, "thief");
    let (node, problem) = graph_memory_error(validate(&other, &r).unwrap_err());
    assert_eq!(node, "thief");
    assert!(
        problem.contains("argument 0 passes graph buffer #0 of another DAG"),
        "{problem}"
    );
    // Even when that DAG allocates a buffer of the same number.
    let (a, _) = other.add_alloc::<f32>(1024).unwrap();
    other.add_dependency(a, kn).unwrap();
    let (node, _) = graph_memory_error(validate(&other, &r).unwrap_err());
    assert_eq!(node, "thief");
    // A copy of the allocating DAG is that DAG: it may use the buffer (and allocates its own
    // memory when lowered).
    let mut copy = s.dag.clone();
    let extra = copy
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&s.buf, &out])
        .unwrap();
    copy.add_dependency(s.fill, extra).unwrap();
    copy.add_dependency(extra, s.free).unwrap();
    validate(&copy, &r).unwrap();
}

#[test]
fn child_graphs_and_conditional_bodies_hold_no_memory_nodes_nor_graph_buffers() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    // A child DAG that allocates.
    let child = scratch(&k, &out).dag;
    let mut dag = Dag::new();
    let c = dag.add_child(&child);
    dag.set_name(c, "inner");
    let err = validate(&dag, &r).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("node `inner/scratch`") && msg.contains("child graph"),
        "{msg}"
    );
    // A conditional body using the enclosing DAG's buffer: named by its path.
    let mut dag = Dag::new();
    let (a, buf) = dag.add_alloc::<f32>(8).unwrap();
    let h = dag.conditional_handle(1);
    let mut body = Dag::new();
    let user = body
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&buf, &out])
        .unwrap();
    body.set_name(user, "user");
    let w = dag.add_if(&h, &body).unwrap();
    dag.set_name(w, "maybe");
    let set = dag
        .add_kernel(&r.kernel("set", &[8]), LaunchConfig::new(1, 1), &args![&h])
        .unwrap();
    let f = dag.add_free(&buf).unwrap();
    dag.chain(&[a, set, w, f]).unwrap();
    // Its kernels pass no graph buffer: the node is named by its path.
    let (node, problem) = graph_memory_error(validate(&dag, &r).unwrap_err());
    assert_eq!(node, "maybe/then/user");
    assert!(problem.contains("conditional body"), "{problem}");
    // A body that allocates: CUDA's node kinds refuse it, named by its path.
    let mut dag = Dag::new();
    let h = dag.conditional_handle(1);
    let w = dag.add_while(&h, &scratch(&k, &out).dag).unwrap();
    dag.set_name(w, "loop");
    let err = validate(&dag, &r).unwrap_err();
    assert!(err.to_string().contains("loop/body/scratch"), "{err}");
}

#[test]
fn memory_nodes_run_on_the_graphs_device_and_so_do_their_users() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let (k, out) = setup(&mut r);
    let mut s = scratch(&k, &out);
    let err = s.dag.place_on(s.alloc, r.device_key(1)).unwrap_err();
    assert!(
        matches!(err, Error::Dag(DagError::Placement { .. })),
        "{err}"
    );
    let err = s.dag.place_on(s.free, r.device_key(1)).unwrap_err();
    assert!(
        matches!(err, Error::Dag(DagError::Placement { .. })),
        "{err}"
    );
    s.dag.place_on(s.fill, r.device_key(1)).unwrap();
    let (node, problem) = graph_memory_error(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "memset#1");
    assert!(
        problem.contains("placed on") && problem.contains("graph's device"),
        "{problem}"
    );
}

#[test]
fn an_allocation_never_freed_needs_auto_free_on_launch() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let mut s = scratch(&k, &out);
    nodes::graph_memory::check_unfreed(&s.dag, false).unwrap();
    s.dag.remove(s.free).unwrap();
    // Validation and lowering accept it (the memory stays allocated after a launch)...
    validate(&s.dag, &r).unwrap();
    s.dag.lower(&mut r).unwrap();
    assert!(!r.transcript().contains("mem_free"));
    // ...instantiation refuses it unless the flag is set.
    let (node, problem) =
        graph_memory_error(nodes::graph_memory::check_unfreed(&s.dag, false).unwrap_err());
    assert_eq!(node, "scratch");
    assert!(
        problem.contains("which no node frees") && problem.contains("auto_free_on_launch"),
        "{problem}"
    );
    nodes::graph_memory::check_unfreed(&s.dag, true).unwrap();
    assert_eq!(
        nodes::graph_memory::unfreed(&s.dag),
        vec![(0, s.alloc)],
        "the allocation the Exec frees on drop"
    );
}

#[test]
fn empty_and_overflowing_allocations_are_refused() {
    let mut dag = Dag::new();
    let (node, problem) = graph_memory_error(dag.add_alloc::<f32>(0).unwrap_err());
    assert_eq!(node, "alloc#0");
    assert!(problem.contains("0 bytes"), "{problem}");
    let (_, problem) = graph_memory_error(dag.add_alloc::<f64>(usize::MAX / 4).unwrap_err());
    assert!(problem.contains("overflow"), "{problem}");
    assert_eq!(dag.node_count(), 0);
}

#[test]
fn a_graph_buffer_is_not_a_stream_launch_argument() {
    let r = rec();
    let mut dag = Dag::new();
    let (_, buf) = dag.add_alloc::<u32>(4).unwrap();
    let a = KernelArg::from(&buf);
    assert!(a.is_graph_buffer() && !a.is_buffer());
    assert_eq!(a.size(), 8);
    let k = r.kernel("use", &[8]);
    let err = k.check_args(&[a]).unwrap_err();
    assert!(err.to_string().contains("graph-allocated buffer"), "{err}");
}

#[test]
fn an_execs_dag_holds_its_graphs_addresses_and_its_updates_keep_them() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let s = scratch(&k, &out);
    // What instantiation does with the addresses lowering got.
    let mut held = s.dag.clone();
    nodes::graph_memory::set_addresses(&mut held, &[(0, 0x6a00_1234_0000)]);
    let Op::Kernel(kn) = held.node(s.kernel).unwrap().op() else {
        panic!("a kernel node")
    };
    assert_eq!(kn.arg_bytes(0), &0x6a00_1234_0000u64.to_ne_bytes());
    let Op::Memset(m) = held.node(s.fill).unwrap().op() else {
        panic!("a memset node")
    };
    let raw = m.generic();
    // SAFETY: a memset node's generic parameters set `memset`.
    assert_eq!(
        unsafe { raw.__bindgen_anon_1.memset.dst } as u64,
        0x6a00_1234_0000
    );
    // A value update of the fill keeps the address.
    let v = held
        .node(s.fill)
        .unwrap()
        .memset_with_value(7u32.into())
        .unwrap();
    // SAFETY: as above.
    assert_eq!(
        unsafe { v.generic().__bindgen_anon_1.memset.dst } as u64,
        0x6a00_1234_0000
    );
    // An Exec's update may change the other argument, not the graph buffer, nor pass one.
    let g = &held.graph_memory;
    let value = KernelArg::from(7u64);
    let buffer = KernelArg::from(&s.buf);
    assert!(g
        .exec_update_problem(s.kernel, [(1, &value)].into_iter())
        .is_none());
    let p = g
        .exec_update_problem(s.kernel, [(0, &value)].into_iter())
        .unwrap();
    assert!(
        p.contains("argument 0 passes a graph-allocated buffer"),
        "{p}"
    );
    let p = g
        .exec_update_problem(s.kernel, [(1, &buffer)].into_iter())
        .unwrap();
    assert!(p.contains("argument 1 is a graph-allocated buffer"), "{p}");
    // A whole-graph update is refused, naming the first memory node.
    assert_eq!(s.dag.graph_memory_node().as_deref(), Some("scratch"));
    assert_eq!(Dag::new().graph_memory_node(), None);
}

#[test]
fn dag_set_kernel_args_keeps_track_of_the_graph_buffers_passed() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let mut s = scratch(&k, &out);
    // A plain value instead: lowered as given, and no longer a use of the buffer.
    s.dag
        .set_kernel_args(s.kernel, &args![42u64, &out])
        .unwrap();
    s.dag.lower(&mut r).unwrap();
    assert!(
        r.transcript().contains("args=[2a00000000000000,"),
        "{}",
        r.transcript()
    );
    // And back, as the second argument: each lowering allocates anew (the recording backend,
    // like CUDA, gives each graph its own addresses).
    s.dag
        .set_kernel_args(s.kernel, &args![&out, &s.buf])
        .unwrap();
    r.clear();
    s.dag.lower(&mut r).unwrap();
    let t = r.transcript();
    assert!(t.contains("dptr=0x6a0000001000"), "{t}");
    assert!(
        t.contains(&format!(",{}]", hex_le(0x6a00_0000_1000))),
        "{t}"
    );
}

#[test]
fn dot_shows_memory_nodes_with_the_span_they_allocate() {
    let mut r = rec();
    let (k, out) = setup(&mut r);
    let s = scratch(&k, &out);
    let dot = s.dag.to_dot();
    assert!(
        dot.contains(
            "n0 [label=\"scratch\\nalloc 4 KiB (graph buffer #0: 1024 × f32)\\nlive until \
             free#3\\nused by memset#1, reduce\", shape=invtrapezium"
        ),
        "{dot}"
    );
    assert!(
        dot.contains("n3 [label=\"free#3\\nfree graph buffer #0\", shape=trapezium"),
        "{dot}"
    );
    assert!(
        dot.contains("memset 4 KiB of 0x0 (4-byte)\\ngraph buffer #0"),
        "{dot}"
    );
    assert!(
        dot.contains("n0 -> n3 [style=dotted, arrowhead=none, color=\"#1098ad\", constraint=false, label=\"span\"];"),
        "{dot}"
    );
    // Graphviz reads it (where installed; CI has it).
    let Some((_, stderr)) = super::tests::graphviz_svg(&dot) else {
        return;
    };
    assert!(stderr.is_empty(), "{stderr}\n{dot}");
}

#[test]
fn a_user_that_reaches_its_free_only_through_a_programmatic_edge_is_refused() {
    use crate::dag::ProgrammaticPort;
    let mut r = rec();
    let (k, out) = setup(&mut r);
    // alloc -> fill -> reduce =(programmatic)=> after -> free: `after` may start, and finish,
    // while `reduce` still uses the buffer.
    let mut dag = Dag::new();
    let (alloc, buf) = dag.add_alloc::<f32>(64).unwrap();
    let fill = dag.add_graph_memset(&buf, 0u32).unwrap();
    let reduce = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&buf, &out])
        .unwrap();
    dag.set_name(reduce, "reduce");
    let after = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&out, &out])
        .unwrap();
    let free = dag.add_free(&buf).unwrap();
    dag.chain(&[alloc, fill, reduce]).unwrap();
    dag.add_programmatic_dependency(reduce, after, ProgrammaticPort::Programmatic)
        .unwrap();
    dag.add_dependency(after, free).unwrap();
    let (node, problem) = graph_memory_error(validate(&dag, &r).unwrap_err());
    assert_eq!(node, "reduce");
    assert!(
        problem.contains("only through a programmatic edge out of it"),
        "{problem}"
    );
    // A full dependency from it towards the free makes the DAG valid.
    dag.add_dependency(reduce, free).unwrap();
    validate(&dag, &r).unwrap();
}
