//! Bad input to the node kinds added since: conditional nodes, graph memory nodes, events and
//! per-node updates, GEMM nodes, device-updatable nodes, programmatic edges.

use super::*;

#[test]
fn conditional_nodes() {
    let mut r = rec();
    let k = r.kernel("step", &[8, 8]);
    let x = r.device_buffer::<f32>(256);
    let one = LaunchConfig::new(1, 1);
    let wrong_kind = |e: &Error| matches!(e, Error::Dag(DagError::WrongKind { .. }));
    let mut dag = Dag::new();
    let h = dag.conditional_handle(0);
    // 49. A SWITCH without cases: refused by the builder (CUDA's size > 0).
    let t = refused(
        "switch without cases",
        &mut dag,
        |d| d.add_switch(&h, &[]),
        wrong_kind,
    );
    assert!(
        has(&t, &["conditional#0", "SWITCH", "at least one case"]),
        "{t}"
    );
    // 50. A handle another DAG declared, read by a conditional node: refused by the builder.
    let mut other = Dag::new();
    let foreign = other.conditional_handle(0);
    let t = refused(
        "conditional node with a handle of another DAG",
        &mut dag,
        |d| d.add_if(&foreign, &Dag::new()),
        wrong_kind,
    );
    assert!(has(&t, &["handle #0", "another DAG"]), "{t}");
    // 51. A body holding a host node (a kind CUDA refuses in a body), named by its path.
    let mut body = Dag::new();
    let host = body.add_host(|| {});
    body.set_name(host, "host");
    let mut d = Dag::new();
    let hd = d.conditional_handle(1);
    let w = d.add_while(&hd, &body).unwrap();
    d.set_name(w, "loop");
    let t = lowering_refused(
        "host node in a body",
        &d,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == "loop/body/host"),
    );
    assert!(has(&t, &["loop/body/host", "is a host node"]), "{t}");
    // 52. An event record node in a child graph inside a body: CUDA's rule holds through child
    // graphs, the node named by its whole path.
    let e = r.event();
    let mut child = Dag::new();
    let rn = child.add_event_record(&e);
    child.set_name(rn, "signal");
    let mut then = Dag::new();
    let c = then.add_child(&child);
    then.set_name(c, "sub");
    let mut d = Dag::new();
    let hd = d.conditional_handle(0);
    let i = d.add_if(&hd, &then).unwrap();
    d.set_name(i, "maybe");
    let t = lowering_refused(
        "event record in a body's child graph",
        &d,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == "maybe/then/sub/signal"),
    );
    assert!(t.contains("record node"), "{t}");
    // 53. A handle passed to a kernel outside the DAG that declared it.
    let mut d = Dag::new();
    let hd = d.conditional_handle(0);
    d.add_if(&hd, &Dag::new()).unwrap();
    let n = d.add_kernel(&k, one, &args![&x, &foreign]).unwrap();
    d.set_name(n, "setter");
    let t = lowering_refused(
        "handle of another DAG as a kernel argument",
        &d,
        &mut r,
        |e| matches!(e, Error::KernelArgs { node: Some(n), .. } if n == "setter"),
    );
    assert!(
        has(&t, &["setter", "step", "argument 1", "another DAG"]),
        "{t}"
    );
    // 54. An enclosing DAG's handle passed through a child graph of a body: out of scope
    // (CUDA's handles reach conditional bodies, not child graphs).
    let mut d = Dag::new();
    let hd = d.conditional_handle(1);
    let mut child = Dag::new();
    child.add_kernel(&k, one, &args![&x, &hd]).unwrap();
    let mut body = Dag::new();
    let c = body.add_child(&child);
    body.set_name(c, "sub");
    let w = d.add_while(&hd, &body).unwrap();
    d.set_name(w, "loop");
    let t = lowering_refused(
        "handle through a child graph",
        &d,
        &mut r,
        |e| matches!(e, Error::KernelArgs { node: Some(n), .. } if n == "loop/body/sub/kernel#0"),
    );
    assert!(t.contains("not through a child graph"), "{t}");
    // 55. A handle no conditional node reads, passed to a kernel (CUDA would not make it).
    let mut d = Dag::new();
    let unread = d.conditional_handle(0);
    let n = d.add_kernel(&k, one, &args![&x, &unread]).unwrap();
    d.set_name(n, "orphan setter");
    let t = lowering_refused(
        "handle no conditional node reads",
        &d,
        &mut r,
        |e| matches!(e, Error::KernelArgs { node: Some(n), .. } if n == "orphan setter"),
    );
    assert!(has(&t, &["handle #0", "no conditional node reads"]), "{t}");
    // 56. One handle read by two conditional nodes: the second is named, with the first.
    let mut d = Dag::new();
    let hd = d.conditional_handle(0);
    let first = d.add_if(&hd, &Dag::new()).unwrap();
    d.set_name(first, "first");
    let second = d.add_while(&hd, &Dag::new()).unwrap();
    d.set_name(second, "second");
    let t = lowering_refused(
        "one handle, two conditional nodes",
        &d,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == "second"),
    );
    assert!(t.contains("`first` reads too"), "{t}");
    // 57. A body that is a copy of the DAG it is inside.
    let mut d = Dag::new();
    let hd = d.conditional_handle(0);
    let copy = d.clone();
    let i = d.add_if(&hd, &copy).unwrap();
    d.set_name(i, "recursive");
    let t = lowering_refused(
        "body that is a copy of its own DAG",
        &d,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == "recursive"),
    );
    assert!(t.contains("copy of a DAG it is inside"), "{t}");
    // 58. A body's node placed on another device: a body runs on the graph's device.
    let mut r2 = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let y = r2.device_buffer::<f32>(16);
    let mut then = Dag::new();
    let m = then.add_memset(&y, 0u32).unwrap();
    then.place_on(m, r2.device_key(1)).unwrap();
    let mut d = Dag::new();
    let hd = d.conditional_handle(0);
    d.add_if(&hd, &then).unwrap();
    let t = lowering_refused(
        "placed node in a body",
        &d,
        &mut r2,
        |e| matches!(e, Error::Dag(DagError::Placement { node, .. }) if node == "conditional#0/then/memset#0"),
    );
    assert!(t.contains("conditional#0/then/memset#0"), "{t}");
    // 59. A handle as a stream launch's argument: refused by the argument check that
    // `Kernel::launch` runs before launching (its bytes are a placeholder).
    let e = k
        .check_args(&args![&x, &h])
        .expect_err("handle in a stream launch");
    assert!(matches!(&e, Error::KernelArgs { node: None, .. }), "{e:?}");
    let t = e.to_string();
    assert!(
        has(&t, &["step", "argument 1", "not a stream launch"]),
        "{t}"
    );
}

#[test]
fn graph_memory_nodes() {
    let mut r = rec();
    let k = r.kernel("reduce", &[8, 8]);
    let out = r.device_buffer::<f32>(256);
    let one = LaunchConfig::new(1, 1);
    let gm = |e: &Error| matches!(e, Error::Dag(DagError::GraphMemory { .. }));
    let gm_at = |want: &'static str| move |e: &Error| matches!(e, Error::Dag(DagError::GraphMemory { node, .. }) if node == want);
    // alloc -> fill -> kernel -> free, each named.
    let scratch = || {
        let mut dag = Dag::new();
        let (alloc, buf) = dag.add_alloc::<f32>(1024).unwrap();
        dag.set_name(alloc, "scratch");
        let fill = dag.add_graph_memset(&buf, 0u32).unwrap();
        dag.set_name(fill, "clear");
        let kn = dag.add_kernel(&k, one, &args![&buf, &out]).unwrap();
        dag.set_name(kn, "use");
        let free = dag.add_free(&buf).unwrap();
        dag.set_name(free, "release");
        dag.chain(&[alloc, fill, kn, free]).unwrap();
        (dag, [alloc, fill, kn, free], buf)
    };
    let (ok, ..) = scratch();
    ok.lower(&mut r).expect("the span as it should be");
    // 60. An allocation of 0 bytes: refused by the builder.
    let mut dag = Dag::new();
    let t = refused("empty allocation", &mut dag, |d| d.add_alloc::<f32>(0), gm);
    assert!(has(&t, &["alloc#0", "0 bytes"]), "{t}");
    // 61. A use not ordered after the allocation.
    let mut d = Dag::new();
    let (_, buf) = d.add_alloc::<f32>(16).unwrap();
    let n = d.add_kernel(&k, one, &args![&buf, &out]).unwrap();
    d.set_name(n, "early");
    let t = lowering_refused("use before the allocation", &d, &mut r, gm_at("early"));
    assert!(
        has(
            &t,
            &[
                "argument 0",
                "graph buffer #0",
                "not ordered after its allocation"
            ]
        ),
        "{t}"
    );
    // 62. A use after the free.
    let (mut d, [.., free], buf) = scratch();
    let late = d.add_graph_memset(&buf, 1u32).unwrap();
    d.set_name(late, "late fill");
    d.add_dependency(free, late).unwrap();
    let t = lowering_refused("use after the free", &d, &mut r, gm_at("late fill"));
    assert!(t.contains("after its free `release`"), "{t}");
    // 63. A use ordered after the allocation but not before the free (it could run after it).
    let (mut d, [alloc, ..], buf) = scratch();
    let side = d.add_kernel(&k, one, &args![&out, &buf]).unwrap();
    d.set_name(side, "stray");
    d.add_dependency(alloc, side).unwrap();
    let t = lowering_refused(
        "use not ordered before the free",
        &d,
        &mut r,
        gm_at("stray"),
    );
    assert!(
        has(&t, &["argument 1", "not ordered before its free `release`"]),
        "{t}"
    );
    // 64. A double free: the builder refuses the second free, naming the first.
    let (mut d, _, buf) = scratch();
    let t = refused("double free", &mut d, |d| d.add_free(&buf), gm);
    assert!(has(&t, &["free#4", "`release` frees already"]), "{t}");
    // 65. A free not ordered after its allocation.
    let mut d = Dag::new();
    let (_, buf) = d.add_alloc::<f32>(16).unwrap();
    let f = d.add_free(&buf).unwrap();
    d.set_name(f, "hasty free");
    let t = lowering_refused(
        "free before its allocation",
        &d,
        &mut r,
        gm_at("hasty free"),
    );
    assert!(
        t.contains("not ordered after its allocation `alloc#0`"),
        "{t}"
    );
    // 66. A free whose allocation node was removed: refused by the builder.
    let (mut d, [alloc, .., free], buf) = scratch();
    d.remove(free).unwrap();
    d.remove(alloc).unwrap();
    let t = refused(
        "free without its allocation",
        &mut d,
        |d| d.add_free(&buf),
        gm,
    );
    assert!(t.contains("whose allocation node was removed"), "{t}");
    // 67-69. A graph buffer of another DAG: freed or filled (refused by the builder), passed
    // to a kernel (refused when lowered).
    let (_, _, foreign) = scratch();
    let mut d = Dag::new();
    let t = refused(
        "free of another DAG's buffer",
        &mut d,
        |d| d.add_free(&foreign),
        gm,
    );
    assert!(t.contains("frees graph buffer #0 of another DAG"), "{t}");
    let t = refused(
        "fill of another DAG's buffer",
        &mut d,
        |d| d.add_graph_memset(&foreign, 0u8),
        gm,
    );
    assert!(t.contains("fills graph buffer #0 of another DAG"), "{t}");
    let n = d.add_kernel(&k, one, &args![&foreign, &out]).unwrap();
    d.set_name(n, "thief");
    let t = lowering_refused(
        "kernel passing another DAG's buffer",
        &d,
        &mut r,
        gm_at("thief"),
    );
    assert!(
        t.contains("argument 0 passes graph buffer #0 of another DAG"),
        "{t}"
    );
    // 70. Memory nodes inside a child graph, named by their path.
    let (child, ..) = scratch();
    let mut d = Dag::new();
    let c = d.add_child(&child);
    d.set_name(c, "inner");
    let t = lowering_refused(
        "memory nodes in a child graph",
        &d,
        &mut r,
        gm_at("inner/scratch"),
    );
    assert!(t.contains("child graph"), "{t}");
    // 71. A graph buffer used inside a conditional body, named by its path.
    let mut d = Dag::new();
    let (a, buf) = d.add_alloc::<f32>(8).unwrap();
    let hd = d.conditional_handle(1);
    let set = d
        .add_kernel(&r.kernel("set", &[8]), one, &args![&hd])
        .unwrap();
    let mut body = Dag::new();
    let user = body.add_kernel(&k, one, &args![&buf, &out]).unwrap();
    body.set_name(user, "user");
    let i = d.add_if(&hd, &body).unwrap();
    d.set_name(i, "maybe");
    let f = d.add_free(&buf).unwrap();
    d.chain(&[a, set, i, f]).unwrap();
    let t = lowering_refused(
        "graph buffer in a conditional body",
        &d,
        &mut r,
        gm_at("maybe/then/user"),
    );
    assert!(t.contains("conditional body"), "{t}");
    // 72. A fill whose value does not divide the buffer (6 bytes, 4-byte value).
    let mut d = Dag::new();
    let (_, odd) = d.add_alloc::<u8>(6).unwrap();
    let t = refused(
        "graph fill of a length the value does not divide",
        &mut d,
        |d| d.add_graph_memset(&odd, 7u32),
        |e| matches!(e, Error::OutOfBounds { node: Some(n), .. } if n == "memset#1"),
    );
    assert!(t.contains("not a whole number of 4-byte values"), "{t}");
    // 73. A memory node placed on another device (memory nodes run on the graph's device).
    let r2 = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let (mut d, [alloc, ..], _) = scratch();
    let t = refused(
        "memory node placed elsewhere",
        &mut d,
        |d| d.place_on(alloc, r2.device_key(1)),
        |e| matches!(e, Error::Dag(DagError::Placement { .. })),
    );
    assert!(has(&t, &["scratch", "cannot be placed"]), "{t}");
    assert_eq!(d.node(alloc).unwrap().device(), None, "not placed");
    // 74. A graph buffer as a stream launch's argument: it has no address outside its graph.
    let e = k
        .check_args(&args![&foreign, &out])
        .expect_err("graph buffer in a stream launch");
    assert!(matches!(&e, Error::KernelArgs { node: None, .. }), "{e:?}");
    let t = e.to_string();
    assert!(
        has(&t, &["reduce", "argument 0", "graph-allocated buffer"]),
        "{t}"
    );
}

#[test]
fn events_and_node_updates() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let wrong_kind = |e: &Error| matches!(e, Error::Dag(DagError::WrongKind { .. }));
    // 75. A record node of an event of another device of the backend (a record node records
    // an event of the graph's own device).
    let elsewhere = r.event_on(1);
    let mut d = Dag::new();
    let n = d.add_event_record(&elsewhere);
    d.set_name(n, "signal");
    let t = lowering_refused(
        "record of another device's event",
        &d,
        &mut r,
        |e| matches!(e, Error::WrongDevice { node: Some(n), .. } if n == "signal"),
    );
    assert!(t.contains("own device"), "{t}");
    // 76. A wait node for an event of another backend.
    let foreign = rec().event();
    let mut d = Dag::new();
    let n = d.add_event_wait(&foreign);
    d.set_name(n, "alien");
    let t = lowering_refused(
        "wait for another backend's event",
        &d,
        &mut r,
        |e| matches!(e, Error::WrongDevice { node: Some(n), .. } if n == "alien"),
    );
    assert!(has(&t, &["alien", "the event belongs to"]), "{t}");
    // 77-79. Updates in the DAG of a node of the wrong kind: an event, a host closure, a
    // priority, each naming the node and both kinds.
    let ev = r.event();
    let x = r.device_buffer::<f32>(64);
    let mut d = Dag::new();
    let empty = d.add_empty();
    d.set_name(empty, "join");
    let fill = d.add_memset(&x, 0u32).unwrap();
    d.set_name(fill, "clear");
    let t = refused(
        "set_event of an empty node",
        &mut d,
        |d| d.set_event(empty, &ev),
        wrong_kind,
    );
    assert!(
        has(
            &t,
            &["join", "an empty node", "an event record or wait node"]
        ),
        "{t}"
    );
    let t = refused(
        "set_host_fn of a memset node",
        &mut d,
        |d| d.set_host_fn(fill, || {}),
        wrong_kind,
    );
    assert!(
        has(&t, &["clear", "a memset node", "not a host node"]),
        "{t}"
    );
    let t = refused(
        "set_priority of an empty node",
        &mut d,
        |d| d.set_priority(empty, 1),
        wrong_kind,
    );
    assert!(has(&t, &["join", "not a kernel node"]), "{t}");
    // 80. A memset value of another size than the node writes.
    let t = refused(
        "set_memset_value of another size",
        &mut d,
        |d| d.set_memset_value(fill, 1u8),
        |e| matches!(e, Error::OutOfBounds { node: Some(n), .. } if n == "clear"),
    );
    assert!(has(&t, &["4-byte values", "1-byte value"]), "{t}");
    // 81. A copy update that changes the copy's direction.
    let y = r.device_buffer::<f32>(64);
    let h = r.host_buffer::<f32>(64);
    let c = d.add_copy(dst(&y), src(&x)).unwrap();
    d.set_name(c, "mirror");
    let t = refused(
        "set_copy changing direction",
        &mut d,
        |d| d.set_copy(c, dst(&h), src(&x)),
        |e| matches!(e, Error::OutOfBounds { node: Some(n), .. } if n == "mirror"),
    );
    assert!(t.contains("cannot become"), "{t}");
}

#[test]
fn gemm_nodes() {
    use cudagraph::{Gemm, Transpose};
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let blas = r.blas();
    let a = r.device_buffer::<f32>(8 * 4);
    let b = r.device_buffer::<f32>(4 * 6);
    let c = r.device_buffer::<f32>(8 * 6);
    let far = r.device_buffer_on::<f32>(1, 4 * 6);
    let mut d = Dag::new();
    d.add_empty();
    let ok = Gemm::<f32>::new(8, 6, 4);
    let gemm = |e: &Error| matches!(e, Error::Dag(DagError::Gemm { node, .. }) if node == "gemm#1");
    // 82. A size of 0.
    let t = refused(
        "gemm with k = 0",
        &mut d,
        |d| d.add_gemm(&blas, &Gemm::new(8, 6, 0), &a, &b, &c),
        gemm,
    );
    assert!(has(&t, &["k = 0", "at least 1"]), "{t}");
    // 83. A size cuBLAS cannot take (its sizes are `int`).
    let t = refused(
        "gemm with m over i32::MAX",
        &mut d,
        |d| d.add_gemm(&blas, &Gemm::new(1 << 31, 6, 4), &a, &b, &c),
        gemm,
    );
    assert!(
        has(&t, &["m = 2147483648", "more than cuBLAS takes"]),
        "{t}"
    );
    // 84. A leading dimension below the stored matrix's rows (A transposed is stored 4 x 8).
    let t = refused(
        "gemm with lda below the stored rows",
        &mut d,
        |d| d.add_gemm(&blas, &ok.trans_a(Transpose::Yes).lda(3), &a, &b, &c),
        gemm,
    );
    assert!(has(&t, &["A's leading dimension 3", "row count 4"]), "{t}");
    // 85. A buffer shorter than the matrix its leading dimension spans.
    let t = refused(
        "gemm with C past its buffer",
        &mut d,
        |d| d.add_gemm(&blas, &ok.ldc(9), &a, &b, &c),
        gemm,
    );
    assert!(
        has(&t, &["C is stored as 8 x 6", "spans 53 elements", "has 48"]),
        "{t}"
    );
    // 86. C in the buffer of an input.
    let t = refused(
        "gemm writing its input",
        &mut d,
        |d| d.add_gemm(&blas, &Gemm::new(4, 4, 4), &a, &b, &a),
        gemm,
    );
    assert!(has(&t, &["C overlaps A"]), "{t}");
    // 87. A buffer of another device than the handle's.
    let t = refused(
        "gemm over another device's buffer",
        &mut d,
        |d| d.add_gemm(&blas, &ok, &a, &far, &c),
        gemm,
    );
    assert!(has(&t, &["B belongs to", "the cuBLAS handle to"]), "{t}");
    // 88. An empty workspace.
    let t = refused(
        "gemm without workspace",
        &mut d,
        |d| d.add_gemm(&blas, &ok.workspace_bytes(0), &a, &b, &c),
        gemm,
    );
    assert!(has(&t, &["workspace", "at least 1 byte"]), "{t}");
    // The same node, well formed, is accepted and lowers to one capture.
    d.add_gemm(&blas, &ok, &a, &b, &c).unwrap();
    d.lower(&mut r).unwrap();
    assert!(
        r.transcript().contains("captured `gemm#1`"),
        "{}",
        r.transcript()
    );
}

#[test]
fn device_updatable_nodes() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let size = r.kernel("size", &[8, 8]);
    let work = r.kernel("work", &[8]);
    let n = r.device_buffer::<i32>(1);
    let x = r.device_buffer::<f32>(256);
    let one = LaunchConfig::new(1, 1);
    let wrong_kind_at = |want: &'static str| move |e: &Error| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == want);
    // size -> work, `work` device-updatable: the handle, the DAG, the two nodes.
    let sized = || {
        let mut dag = Dag::new();
        let s = dag.add_kernel(&size, one, &args![0u64, &n]).unwrap();
        dag.set_name(s, "size");
        let w = dag.add_kernel(&work, one, &args![&x]).unwrap();
        dag.set_name(w, "work");
        let h = dag.device_node(w).unwrap();
        dag.set_kernel_args(s, &args![&h, &n]).unwrap();
        dag.add_dependency(s, w).unwrap();
        (dag, h, s, w)
    };
    let (ok, ..) = sized();
    ok.lower(&mut r)
        .expect("a device-updatable node as it should be");
    // 89. A node that is not a kernel made device-updatable: refused by the builder.
    let mut dag = Dag::new();
    let e = dag.add_empty();
    let t = refused(
        "device node of an empty node",
        &mut dag,
        |d| d.device_node(e),
        wrong_kind_at("empty#0"),
    );
    assert!(has(&t, &["a kernel node"]), "{t}");
    // 90. A kernel passing the device node of another DAG.
    let (_, foreign, ..) = sized();
    let mut dag = Dag::new();
    let u = dag.add_kernel(&size, one, &args![&foreign, &n]).unwrap();
    dag.set_name(u, "stranger");
    let t = lowering_refused(
        "device node of another DAG",
        &dag,
        &mut r,
        wrong_kind_at("stranger"),
    );
    assert!(has(&t, &["device node #0 of another DAG"]), "{t}");
    // 91. Device-updatable nodes inside a child graph (named by path).
    let (inner, ..) = sized();
    let mut dag = Dag::new();
    let c = dag.add_child(&inner);
    dag.set_name(c, "inner");
    let t = lowering_refused(
        "device nodes in a child graph",
        &dag,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node.starts_with("inner/")),
    );
    assert!(has(&t, &["inside a child graph"]), "{t}");
    // 92. The device-updatable node placed on another device than the graph's.
    let (mut dag, _, _, w) = sized();
    dag.place_on(w, r.device_key(1)).unwrap();
    let t = lowering_refused(
        "device-updatable node placed elsewhere",
        &dag,
        &mut r,
        |e| matches!(e, Error::Dag(DagError::WrongKind { node, .. }) if node == "work"),
    );
    assert!(has(&t, &["placed on", "device node #0"]), "{t}");
    // 93. A removed device-updatable node whose handle a kernel still passes.
    let (mut dag, _, _, w) = sized();
    dag.remove(w).unwrap();
    let t = lowering_refused("removed device node", &dag, &mut r, wrong_kind_at("size"));
    assert!(has(&t, &["was removed"]), "{t}");
}

#[test]
fn programmatic_edges() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let x = r.device_buffer::<f32>(64);
    let k = r.kernel("step", &[8]);
    let one = LaunchConfig::new(1, 32);
    let port = ProgrammaticPort::Programmatic;
    let two = |dag: &mut Dag| {
        let a = dag.add_kernel(&k, one, &args![&x]).unwrap();
        let b = dag.add_kernel(&k, one, &args![&x]).unwrap();
        dag.set_name(a, "a");
        dag.set_name(b, "b");
        (a, b)
    };
    let programmatic_at = |before: &'static str, after: &'static str| {
        move |e: &Error| {
            matches!(e, Error::Dag(DagError::Programmatic { before: b, after: a, .. })
                if b == before && a == after)
        }
    };
    let mut ok = Dag::new();
    let (a, b) = two(&mut ok);
    ok.add_programmatic_dependency(a, b, port).unwrap();
    ok.lower(&mut r)
        .expect("a programmatic edge as it should be");
    // 94. A programmatic edge to a node that is not a kernel.
    let mut dag = Dag::new();
    let (a, _) = two(&mut dag);
    let m = dag.add_memset(&x, 0u32).unwrap();
    dag.set_name(m, "fill");
    let t = refused(
        "programmatic edge to a memset",
        &mut dag,
        |d| d.add_programmatic_dependency(a, m, port),
        programmatic_at("a", "fill"),
    );
    assert!(
        has(&t, &["`fill` is a memset node", "two kernel nodes"]),
        "{t}"
    );
    // 95. Kernels placed on two devices: refused when added.
    let k1 = r.kernel_on(1, "step", &[]);
    let mut dag = Dag::new();
    let (a, _) = two(&mut dag);
    let c = dag.add_kernel(&k1, one, &[]).unwrap();
    dag.set_name(c, "c");
    dag.place_on(a, r.device_key(0)).unwrap();
    dag.place_on(c, r.device_key(1)).unwrap();
    let t = refused(
        "programmatic edge across devices",
        &mut dag,
        |d| d.add_programmatic_dependency(a, c, port),
        programmatic_at("a", "c"),
    );
    assert!(has(&t, &["two devices"]), "{t}");
    // 96. The same with `a` unplaced (the home device): refused by lowering.
    dag.unplace(a).unwrap();
    dag.add_programmatic_dependency(a, c, port).unwrap();
    let t = lowering_refused(
        "programmatic edge across devices, unplaced",
        &dag,
        &mut r,
        programmatic_at("a", "c"),
    );
    assert!(has(&t, &["run on two devices"]), "{t}");
    // 97. Two nodes already joined by a plain edge.
    let mut dag = Dag::new();
    let (a, b) = two(&mut dag);
    dag.add_dependency(a, b).unwrap();
    let t = refused(
        "programmatic edge over a plain one",
        &mut dag,
        |d| d.add_programmatic_dependency(a, b, port),
        programmatic_at("a", "b"),
    );
    assert!(has(&t, &["plain edge"]), "{t}");
    // 98. A device older than compute capability 9.0: refused by lowering.
    let mut ampere = RecordingBackend::new(DeviceLimits {
        compute_capability: (8, 6),
        ..DeviceLimits::hopper()
    });
    let xa = ampere.device_buffer::<f32>(64);
    let ka = ampere.kernel("step", &[8]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&ka, one, &args![&xa]).unwrap();
    let b = dag.add_kernel(&ka, one, &args![&xa]).unwrap();
    dag.add_programmatic_dependency(a, b, port).unwrap();
    let t = lowering_refused(
        "programmatic edge before Hopper",
        &dag,
        &mut ampere,
        programmatic_at("kernel#0", "kernel#1"),
    );
    assert!(has(&t, &["compute capability 8.6", "9.0"]), "{t}");
}
