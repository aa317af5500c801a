//! Bad input to the builder's core: graph structure, kernel nodes, copies and fills, events,
//! child graphs and FFTs, collectives, the environment and its libraries.

use super::*;

#[test]
fn graph_structure() {
    let mut dag = Dag::new();
    let a = dag.add_empty();
    let b = dag.add_empty();
    let c = dag.add_empty();
    dag.chain(&[a, b, c]).unwrap();
    dag.set_name(a, "a");
    dag.set_name(c, "c");
    // 1. A self-loop.
    let t = refused(
        "self-loop",
        &mut dag,
        |d| d.add_dependency(a, a),
        |e| matches!(e, Error::Dag(DagError::Cycle { .. })),
    );
    assert!(t.contains("a"), "{t}");
    // 2. An edge closing a cycle names the cycle in order.
    let t = refused(
        "cycle",
        &mut dag,
        |d| d.add_dependency(c, a),
        |e| matches!(e, Error::Dag(DagError::Cycle { .. })),
    );
    assert!(has(&t, &["c", "a", "->"]), "{t}");
    // 3. A fan-out with one edge that closes a cycle adds none of its edges.
    let d2 = dag.add_empty();
    refused(
        "fan-out with a cycle",
        &mut dag,
        |d| d.fan_out(c, &[d2, a]),
        |e| matches!(e, Error::Dag(DagError::Cycle { .. })),
    );
    // 4. A removed node.
    let gone = dag.add_empty();
    dag.remove(gone).unwrap();
    refused(
        "removed node",
        &mut dag,
        |d| d.add_dependency(a, gone),
        |e| matches!(e, Error::Dag(DagError::UnknownNode(_))),
    );
    // 5. Removing it again.
    refused(
        "removed twice",
        &mut dag,
        |d| d.remove(gone).map(|_| ()),
        |e| matches!(e, Error::Dag(DagError::UnknownNode(_))),
    );
    // 6. A node of another DAG (an id this DAG never made).
    let mut other = Dag::new();
    for _ in 0..10 {
        other.add_empty();
    }
    let foreign = other.add_empty();
    refused(
        "foreign node",
        &mut dag,
        |d| d.add_dependency(foreign, a),
        |e| matches!(e, Error::Dag(DagError::UnknownNode(_))),
    );
    // 7. Placing a node on a device the backend does not have is refused when lowered.
    let mut r = rec();
    let elsewhere = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let mut p = Dag::new();
    let e = p.add_empty();
    p.place_on(e, elsewhere.device_key(1)).unwrap();
    let t = lowering_refused("placed elsewhere", &p, &mut r, |e| {
        matches!(e, Error::Dag(DagError::Placement { .. }))
    });
    assert!(t.contains("not a device of the backend"), "{t}");
}

#[test]
fn kernel_nodes() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(256);
    let k = r.kernel("scale", &[8, 4]);
    let mut dag = Dag::new();
    let cfg = LaunchConfig::new(1, 256);
    let args_err = |e: &Error| matches!(e, Error::KernelArgs { .. });
    // 8-10. Too few, too many, a wrong size.
    let t = refused(
        "too few arguments",
        &mut dag,
        |d| d.add_kernel(&k, cfg, &args![&x]),
        args_err,
    );
    assert!(has(&t, &["scale", "2"]), "{t}");
    refused(
        "too many arguments",
        &mut dag,
        |d| d.add_kernel(&k, cfg, &args![&x, 1.0f32, 2u32]),
        args_err,
    );
    let t = refused(
        "wrong argument size",
        &mut dag,
        |d| d.add_kernel(&k, cfg, &args![&x, 1.0f64]),
        args_err,
    );
    assert!(t.contains("argument 1"), "{t}");
    // 11. An empty grid, 12. too many threads in a block, 13. a grid too tall,
    // 14. shared memory over the limit: refused when validated against the device (lowering),
    // naming the node.
    for (case, bad) in [
        ("empty grid", LaunchConfig::new(0, 256)),
        ("block over 1024 threads", LaunchConfig::new(1, 2048)),
        (
            "grid y over 65535",
            LaunchConfig::new((1u32, 70_000u32, 1u32), 32),
        ),
        (
            "shared memory over the limit",
            LaunchConfig::new(1, 32).with_shared_mem(1 << 30),
        ),
    ] {
        let mut d = Dag::new();
        let n = d.add_kernel(&k, bad, &args![&x, 1.0f32]).unwrap();
        d.set_name(n, case);
        let t = lowering_refused(case, &d, &mut r, |e| {
            matches!(e, Error::LaunchShape { node: Some(_), .. })
        });
        assert!(t.contains(case), "{t}");
    }
    let n = dag.add_kernel(&k, cfg, &args![&x, 1.0f32]).unwrap();
    dag.set_name(n, "good");
    // 15. A kernel update of a node that is not a kernel node.
    let e = dag.add_empty();
    dag.set_name(e, "not a kernel");
    let t = refused(
        "kernel update of another kind",
        &mut dag,
        |d| d.set_launch_config(e, cfg),
        |e| matches!(e, Error::Dag(DagError::WrongKind { .. })),
    );
    assert!(t.contains("not a kernel"), "{t}");
    // 16. New arguments that do not fit.
    refused(
        "bad set_kernel_args",
        &mut dag,
        |d| d.set_kernel_args(n, &args![&x]),
        args_err,
    );
    // 17-20. Launch attributes that do not fit the shape.
    let attrs = |f: &dyn Fn(&mut LaunchAttributes)| {
        let mut a = LaunchAttributes::default();
        f(&mut a);
        a
    };
    for (case, a) in [
        (
            "cluster not dividing the grid",
            attrs(&|a| a.cluster = Some(Dim3::from((3, 1, 1)))),
        ),
        (
            "cluster over the portable size",
            attrs(&|a| a.cluster = Some(Dim3::from((16, 1, 1)))),
        ),
        (
            "carve-out over 100 %",
            attrs(&|a| a.shared_mem_carveout = Some(101)),
        ),
    ] {
        dag.set_launch_config(n, LaunchConfig::new(16, 32)).unwrap();
        refused(
            case,
            &mut dag,
            |d| d.set_launch_attributes(n, a),
            |e| matches!(e, Error::LaunchShape { node: Some(_), .. }),
        );
    }
    // 21. A buffer of another backend: refused when added.
    let mut r2 = rec();
    let y = r2.device_buffer::<f32>(256);
    let t = refused(
        "buffer of another backend",
        &mut dag,
        |d| d.add_kernel(&k, cfg, &args![&y, 1.0f32]),
        args_err,
    );
    assert!(t.contains("argument 0"), "{t}");
    // 22. A kernel of another backend than its buffers: refused when added.
    let k2 = r2.kernel("scale", &[8, 4]);
    let t = refused(
        "kernel of another backend",
        &mut dag,
        |d| d.add_kernel(&k2, cfg, &args![&x, 1.0f32]),
        args_err,
    );
    assert!(t.contains("another device or backend"), "{t}");
}

#[test]
fn copies_and_fills() {
    let mut r = rec();
    let a = r.device_buffer::<f32>(256);
    let b = r.device_buffer::<f32>(128);
    let h = r.host_buffer::<f32>(256);
    let bytes = r.device_buffer::<u8>(64);
    let mut dag = Dag::new();
    let oob = |e: &Error| matches!(e, Error::OutOfBounds { node: Some(_), .. });
    // 23. Copies of different sizes.
    refused(
        "copy sizes differ",
        &mut dag,
        |d| d.add_copy(dst(&a), src(&b)),
        oob,
    );
    // 24. A region past its buffer.
    refused(
        "copy past the end",
        &mut dag,
        |d| d.add_memcpy(a.region(200..300), h.region(0..100)),
        oob,
    );
    // 25. A 2D copy between elements of different sizes.
    refused(
        "element sizes differ",
        &mut dag,
        |d| {
            d.add_memcpy_2d(Copy2d {
                dst: bytes.region(..),
                dst_pitch: 8,
                src: a.region(..),
                src_pitch: 8,
                width: 8,
                height: 2,
            })
        },
        oob,
    );
    // 26. A 2D copy wider than its pitch, 27. rows past the buffer, 28. sizes that overflow.
    for (case, c) in [
        (
            "2D width over the pitch",
            Copy2d {
                dst: a.region(..),
                dst_pitch: 8,
                src: h.region(..),
                src_pitch: 16,
                width: 16,
                height: 4,
            },
        ),
        (
            "2D rows past the end",
            Copy2d {
                dst: a.region(..),
                dst_pitch: 16,
                src: h.region(..),
                src_pitch: 16,
                width: 16,
                height: 64,
            },
        ),
        (
            "2D sizes overflow",
            Copy2d {
                dst: a.region(..),
                dst_pitch: usize::MAX / 2,
                src: h.region(..),
                src_pitch: 16,
                width: 16,
                height: 2,
            },
        ),
    ] {
        refused(case, &mut dag, |d| d.add_memcpy_2d(c), oob);
    }
    // 29. A fill past the end, 30. a fill value wider than the elements, 31. a 2D fill wider
    // than its pitch.
    refused(
        "fill past the end",
        &mut dag,
        |d| d.add_memset(a.region(250..300), 0u32),
        oob,
    );
    refused(
        "fill of a length the value does not divide",
        &mut dag,
        |d| d.add_memset(bytes.region(0..7), 7u32),
        |e| {
            matches!(
                e,
                Error::OutOfBounds { .. } | Error::Dag(DagError::WrongKind { .. })
            )
        },
    );
    refused(
        "2D fill wider than its pitch",
        &mut dag,
        |d| {
            d.add_memset_2d(Memset2d {
                dst: a.region(..),
                pitch: 4,
                width: 8,
                height: 2,
                value: 0u32.into(),
            })
        },
        oob,
    );
    // 32. A copy to host memory of another backend, refused when lowered.
    let mut r2 = rec();
    let h2 = r2.host_buffer::<f32>(256);
    let mut d2 = Dag::new();
    d2.add_copy(dst(&h2), src(&a)).unwrap();
    lowering_refused("copy to another backend's memory", &d2, &mut r, |e| {
        matches!(e, Error::WrongDevice { node: Some(_), .. })
    });
}

#[test]
fn events_children_and_ffts() {
    let mut r = rec();
    let mut other = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    // 33. An event of another backend, recorded.
    let ev = other.event_on(1);
    let mut dag = Dag::new();
    dag.add_event_record(&ev);
    lowering_refused("event of another backend", &dag, &mut r, |e| {
        matches!(e, Error::WrongDevice { node: Some(_), .. })
    });
    // 34. A child graph with a bad node: the error names the path into the child.
    let y = other.device_buffer::<f32>(16);
    let x = r.device_buffer::<f32>(16);
    let mut child = Dag::new();
    let c = child.add_copy(dst(&x), src(&y)).unwrap();
    child.set_name(c, "inner");
    let mut parent = Dag::new();
    let ch = parent.add_child(&child);
    parent.set_name(ch, "outer");
    let t = lowering_refused(
        "bad node in a child",
        &parent,
        &mut r,
        |e| matches!(e, Error::WrongDevice { node: Some(n), .. } if n == "outer/inner"),
    );
    assert!(has(&t, &["outer/inner", "source buffer"]), "{t}");
    // 35-37. FFT plans that cannot be made (`Error::FftPlan`): no sizes, a zero size, a zero
    // batch (and sizes that overflow).
    for (case, desc) in [
        ("FFT without sizes", FftPlanDesc::new(FftType::C2C, &[], 1)),
        ("FFT of size 0", FftPlanDesc::new(FftType::C2C, &[0], 1)),
        ("FFT batch 0", FftPlanDesc::new(FftType::C2C, &[64], 0)),
        (
            "FFT sizes that overflow",
            FftPlanDesc::new(FftType::C2C, &[1 << 40, 1 << 40], 1 << 20),
        ),
    ] {
        let e = FftPlan::new(desc).expect_err(case);
        assert!(matches!(&e, Error::FftPlan { .. }), "{case}: {e:?}");
        assert!(e.to_string().starts_with("FFT plan: "), "{case}: {e}");
    }
}

#[test]
fn collectives() {
    let mut r0 = rec();
    let mut r1 = rec();
    let comms = Communicators::recording(&[&r0, &r1]);
    let c0 = comms.comm(0).unwrap();
    let a = r0.device_buffer::<f32>(1024);
    let b = r0.device_buffer::<f32>(1000);
    let mut dag = Dag::new();
    let coll = |e: &Error| matches!(e, Error::Dag(DagError::Collective { .. }));
    // 38. All-reduce lengths, 39. all-gather lengths, 40. a broadcast root that is no rank,
    // 41. a send to a rank that does not exist, 42. a send to itself without its receive.
    refused(
        "all-reduce lengths",
        &mut dag,
        |d| d.add_all_reduce(&c0, &a, &b, ReduceOp::Sum),
        coll,
    );
    refused(
        "all-gather lengths",
        &mut dag,
        |d| d.add_all_gather(&c0, &a, &b),
        coll,
    );
    refused(
        "broadcast root",
        &mut dag,
        |d| d.add_broadcast(&c0, &a, &a, 2),
        coll,
    );
    refused(
        "send to no rank",
        &mut dag,
        |d| d.add_send(&c0, &a, 5),
        coll,
    );
    refused("send to itself", &mut dag, |d| d.add_send(&c0, &a, 0), coll);
    // 43. A rank that does not exist.
    assert!(comms.comm(2).is_err());
    // 44. DAGs whose collectives do not match across ranks.
    let c1 = comms.comm(1).unwrap();
    let a1 = r1.device_buffer::<f32>(1024);
    let mut d0 = Dag::new();
    d0.add_all_reduce(&c0, &a, &a, ReduceOp::Sum).unwrap();
    let mut d1 = Dag::new();
    d1.add_all_reduce(&c1, &a1, &a1, ReduceOp::Max).unwrap();
    let e = comms.check_ranks(&[&d0, &d1]).expect_err("ops differ");
    assert!(
        matches!(e, Error::Dag(DagError::Collective { .. })),
        "{e:?}"
    );
    // 45. The wrong number of DAGs.
    assert!(comms.check_ranks(&[&d0]).is_err());
}

#[test]
fn environment_and_libraries() {
    // 46. No CUDA device (none here, or one that cannot be used): a typed error, not a panic.
    if let Err(e) = cudagraph::Device::get(0) {
        assert!(
            matches!(
                e,
                Error::NoDevice(_) | Error::LibraryNotFound { .. } | Error::Cuda { .. }
            ),
            "{e:?}"
        );
    }
    // 47. A device ordinal that does not exist.
    assert!(cudagraph::Device::get(1 << 20).is_err());
    // 48. A compile with neither a device nor an architecture: refused before NVRTC is loaded.
    let e = cudagraph::compile(
        None,
        "__global__ void k() {}",
        &cudagraph::CompileOptions::default(),
    )
    .expect_err("no target");
    assert!(
        matches!(
            &e,
            Error::BadOptions {
                what: "compile",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("CompileOptions::arch"), "{e}");
}
