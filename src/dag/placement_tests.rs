//! Host-only tests of node placement: nodes on chosen devices of a multi-device
//! [`RecordingBackend`], validation per node device (peer reachability), lowering (each node on
//! its device, peer access enabled once per pair).

use super::*;
use crate::args;
use crate::device::DeviceLimits;
use crate::{LaunchConfig, Region};

fn rec(devices: usize) -> RecordingBackend {
    RecordingBackend::with_devices(DeviceLimits::hopper(), devices)
}

/// The calls' `name device` pairs (device 0 for calls without a ` device=` suffix).
fn devices_of(r: &RecordingBackend) -> Vec<(String, usize)> {
    r.calls()
        .iter()
        .map(|c| {
            let d = c
                .params
                .rsplit_once(" device=")
                .map_or(0, |(_, d)| d.parse().unwrap());
            (c.name.clone(), d)
        })
        .collect()
}

/// The DAG error of a failed lowering (panics on anything else).
fn dag_error(e: Error) -> DagError {
    match e {
        Error::Dag(d) => d,
        other => panic!("not a DAG error: {other:?}"),
    }
}

#[test]
fn placed_kernels_memsets_and_copies_lower_on_their_devices() {
    let mut r = rec(3);
    let a = r.device_buffer_on::<f32>(0, 256);
    let b = r.device_buffer_on::<f32>(1, 256);
    let c = r.device_buffer_on::<f32>(2, 256);
    let k0 = r.kernel_on(0, "scale", &[8, 4]);
    let k1 = r.kernel_on(1, "scale", &[8, 4]);
    let mut dag = Dag::new();
    let fill = dag.add_memset(&c, 0u32).unwrap();
    dag.place_on(fill, r.device_key(2)).unwrap();
    let on1 = dag
        .add_kernel(&k1, LaunchConfig::new(1, 256), &args![&b, 2.0f32])
        .unwrap();
    dag.place_on(on1, r.device_key(1)).unwrap();
    // Device 1 -> device 2, placed on device 2 (which reads device 1's memory).
    let to2 = dag.add_copy(dst(&c), src(&b)).unwrap();
    dag.place_on(to2, r.device_key(2)).unwrap();
    // Device 2 -> device 0, unplaced: runs on the home device, reads device 2's memory.
    let to0 = dag.add_copy(dst(&a), src(&c)).unwrap();
    let home = dag
        .add_kernel(&k0, LaunchConfig::new(1, 256), &args![&a, 3.0f32])
        .unwrap();
    dag.chain(&[on1, to2, to0, home]).unwrap();
    dag.add_dependency(fill, to2).unwrap();
    assert_eq!(dag.node(on1).unwrap().device(), Some(r.device_key(1)));
    let dot = dag.to_dot();
    assert!(
        dot.contains(&format!("\\non {}\"", r.device_key(1))),
        "placed nodes say where in DOT:\n{dot}"
    );
    assert_eq!(dag.node(home).unwrap().device(), None);

    let handles = dag.lower(&mut r).unwrap();
    assert_eq!(handles.iter().flatten().count(), 5);
    assert_eq!(
        devices_of(&r),
        [
            ("memset#0".to_string(), 2),
            ("kernel#1".to_string(), 1),
            ("memcpy#2".to_string(), 2),
            ("memcpy#3".to_string(), 0),
            ("kernel#4".to_string(), 0),
        ]
    );
    // Only the pairs some node needs, each once: device 2 reads device 1's memory, the home
    // device reads device 2's.
    assert_eq!(r.peer_access_enabled(), &[(2, 1), (0, 2)]);
    // The copies are ordinary device-to-device copies (unified addressing).
    let t = r.transcript();
    assert!(
        t.lines()
            .nth(2)
            .unwrap()
            .ends_with("bytes=1024 kind=DeviceToDevice device=2"),
        "{t}"
    );
    assert!(
        t.lines().nth(3).unwrap().ends_with("kind=DeviceToDevice"),
        "{t}"
    );

    // Lowering again enables the pairs again (CUDA treats "already enabled" as success).
    r.clear();
    dag.lower(&mut r).unwrap();
    assert_eq!(r.peer_access_enabled(), &[(2, 1), (0, 2)]);
}

#[test]
fn placed_on_the_home_device_lowers_as_unplaced() {
    let mut r = rec(2);
    let x = r.device_buffer::<f32>(64);
    let k = r.kernel("k", &[8]);
    let build = |place: bool| {
        let mut dag = Dag::new();
        let fill = dag.add_memset(&x, 0u32).unwrap();
        let run = dag
            .add_kernel(&k, LaunchConfig::new(1, 64), &args![&x])
            .unwrap();
        dag.add_dependency(fill, run).unwrap();
        if place {
            dag.place_on(fill, r.device_key(0)).unwrap();
            dag.place_on(run, r.device_key(0)).unwrap();
        }
        dag
    };
    let (unplaced, placed) = (build(false), build(true));
    unplaced.lower(&mut r).unwrap();
    let expected = r.transcript();
    r.clear();
    placed.lower(&mut r).unwrap();
    assert_eq!(r.transcript(), expected);
    assert!(!expected.contains("device="), "{expected}");
    assert!(r.peer_access_enabled().is_empty());
}

#[test]
fn wrong_device_errors_name_the_node_and_both_devices() {
    let mut r = rec(2);
    let x = r.device_buffer_on::<f32>(1, 64);
    let k0 = r.kernel_on(0, "k", &[8]);
    let mut dag = Dag::new();
    let n = dag
        .add_kernel(&k0, LaunchConfig::new(1, 64), &args![&x])
        .unwrap();
    dag.set_name(n, "misplaced");
    dag.place_on(n, r.device_key(1)).unwrap();
    let e = dag.lower(&mut r).unwrap_err();
    let (home, one) = (r.device_key(0), r.device_key(1));
    match e {
        Error::WrongDevice { node, problem } => {
            assert_eq!(node.as_deref(), Some("misplaced"));
            assert_eq!(
                problem,
                format!("kernel `k` belongs to {home}, but the node runs on {one}")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(one.to_string().ends_with(" device 1"), "{one}");
    assert!(r.calls().is_empty(), "nothing lowered from an invalid DAG");

    // A node placed on a device the backend does not have.
    let other = rec(2);
    let mut dag = Dag::new();
    let e = dag.add_empty();
    dag.place_on(e, other.device_key(1)).unwrap();
    match dag_error(dag.lower(&mut r).unwrap_err()) {
        DagError::Placement { node, problem } => {
            assert_eq!(node, "empty#0");
            assert!(
                problem.contains(&format!("placed on {}", other.device_key(1)))
                    && problem.contains("not a device of the backend"),
                "{problem}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn buffers_unreachable_by_peer_are_refused() {
    let mut r = rec(2);
    let on0 = r.device_buffer_on::<f32>(0, 64);
    let k1 = r.kernel_on(1, "k", &[8]);
    r.set_peer_access(1, 0, false);
    let (home, one) = (r.device_key(0), r.device_key(1));

    // A kernel on device 1 with an argument on device 0: accepted when added (buffers of any
    // device of the backend), refused at validation.
    let mut dag = Dag::new();
    let n = dag
        .add_kernel(&k1, LaunchConfig::new(1, 64), &args![&on0])
        .unwrap();
    dag.place_on(n, one).unwrap();
    match dag.lower(&mut r).unwrap_err() {
        Error::WrongDevice { node, problem } => {
            assert_eq!(node.as_deref(), Some("kernel#0"));
            assert_eq!(
                problem,
                format!(
                    "the argument 0's buffer belongs to {home}, which {one} cannot access by \
                     peer (the node runs on {one})"
                )
            );
        }
        other => panic!("{other:?}"),
    }

    // A memset on device 1 of device 0's memory.
    let mut dag = Dag::new();
    let m = dag.add_memset(&on0, 1u32).unwrap();
    dag.place_on(m, one).unwrap();
    let e = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(e, Error::WrongDevice { node: Some(_), .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&format!(
            "destination buffer belongs to {home}, which {one} cannot"
        )),
        "{e}"
    );

    // Reachable the other way round: a home-device memset of device 1's memory is fine.
    let on1 = r.device_buffer_on::<f32>(1, 64);
    let mut dag = Dag::new();
    dag.add_memset(&on1, 1u32).unwrap();
    r.clear();
    dag.lower(&mut r).unwrap();
    assert_eq!(r.peer_access_enabled(), &[(0, 1)]);

    // Once device 1 can reach device 0, the kernel lowers there.
    r.set_peer_access(1, 0, true);
    let mut dag = Dag::new();
    let n = dag
        .add_kernel(&k1, LaunchConfig::new(1, 64), &args![&on0])
        .unwrap();
    dag.place_on(n, one).unwrap();
    r.clear();
    dag.lower(&mut r).unwrap();
    assert_eq!(r.peer_access_enabled(), &[(1, 0)]);
    assert!(r.calls()[0].params.ends_with(" device=1"));
}

#[test]
fn cross_device_copies_follow_peer_reachability() {
    let mut r = rec(2);
    let a = r.device_buffer_on::<u8>(0, 1024);
    let b = r.device_buffer_on::<u8>(1, 1024);
    r.set_peer_access(1, 0, false); // device 0 reaches 1, not the other way
    let build = |place: Option<DeviceKey>| {
        let mut dag = Dag::new();
        let c = dag.add_copy(dst(&b), src(&a)).unwrap();
        if let Some(k) = place {
            dag.place_on(c, k).unwrap();
        }
        dag
    };
    // On device 0 (placed or unplaced), which reaches device 1: allowed.
    for place in [None, Some(r.device_key(0))] {
        r.clear();
        build(place).lower(&mut r).unwrap();
        assert_eq!(r.peer_access_enabled(), &[(0, 1)]);
        assert!(r.calls()[0].params.ends_with("kind=DeviceToDevice"));
    }
    // On device 1, which cannot reach device 0: refused, naming the source's device.
    let e = build(Some(r.device_key(1))).lower(&mut r).unwrap_err();
    assert!(
        matches!(e, Error::WrongDevice { node: Some(_), .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&format!(
            "source buffer belongs to {}, which {} cannot access by peer",
            r.device_key(0),
            r.device_key(1)
        )),
        "{e}"
    );
    // Pinned host memory may be used from every device, with no peer access.
    r.set_peer_access(0, 1, false);
    let h = r.host_buffer::<u8>(1024);
    let mut dag = Dag::new();
    let down = dag.add_copy(dst(&h), src(&b)).unwrap();
    dag.place_on(down, r.device_key(1)).unwrap();
    r.clear();
    dag.lower(&mut r).unwrap();
    assert!(r.peer_access_enabled().is_empty());
    assert!(r.calls()[0].params.ends_with("kind=DeviceToHost device=1"));
}

#[test]
fn fft_captured_collective_and_child_nodes_cannot_be_placed() {
    let mut r = rec(2);
    let x = r.device_buffer_on::<f32>(0, 64);
    let mut dag = Dag::new();
    // SAFETY: the work enqueues nothing (the recording backend never calls it anyway).
    let cap = unsafe { dag.add_captured("library call", [Region::from(&x)], |_| Ok(())) };
    let child = dag.add_child(&Dag::new());
    for id in [cap, child] {
        match dag_error(dag.place_on(id, r.device_key(1)).unwrap_err()) {
            DagError::Placement { node, problem } => {
                assert_eq!(node, dag.node(id).unwrap().name());
                assert!(problem.contains("cannot be placed"), "{problem}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(dag.node(id).unwrap().device(), None);
    }

    // A child DAG whose node is placed on another device is refused at validation; placed on
    // the home device, it lowers.
    let mut inner = Dag::new();
    let e = inner.add_empty();
    inner.place_on(e, r.device_key(1)).unwrap();
    let mut dag = Dag::new();
    dag.add_child(&inner);
    let err = dag.lower(&mut r).unwrap_err().to_string();
    assert!(
        err.contains("node `child#0/empty#0`") && err.contains("nodes of a child graph run on"),
        "{err}"
    );
    inner.place_on(e, r.device_key(0)).unwrap();
    let mut dag = Dag::new();
    dag.add_child(&inner);
    dag.lower(&mut r).unwrap();
    inner.unplace(e).unwrap();
    assert_eq!(inner.node(e).unwrap().device(), None);
}

#[test]
fn child_graphs_using_peer_memory_get_peer_access_from_the_parent() {
    let mut r = rec(2);
    let far = r.device_buffer_on::<u32>(1, 16);
    let mut inner = Dag::new();
    inner.add_memset(&far, 7u32).unwrap();
    let mut dag = Dag::new();
    dag.add_child(&inner);
    dag.lower(&mut r).unwrap();
    assert_eq!(r.peer_access_enabled(), &[(0, 1)]);
    r.set_peer_access(0, 1, false);
    let e = dag.lower(&mut r).unwrap_err().to_string();
    assert!(e.contains("cannot access by peer"), "{e}");
}

#[test]
fn kernel_buffers_of_another_backend_are_still_refused_when_added() {
    let r = rec(2);
    let mut other = rec(2);
    let foreign = other.device_buffer_on::<f32>(1, 4);
    let k = r.kernel_on(1, "k", &[8]);
    let mut dag = Dag::new();
    let e = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&foreign])
        .unwrap_err();
    assert!(e.to_string().contains("another device or backend"), "{e}");
    // A buffer of another device of the same backend is accepted when added.
    let mut r = r;
    let mine = r.device_buffer_on::<f32>(0, 4);
    dag.add_kernel(&k, LaunchConfig::new(1, 1), &args![&mine])
        .unwrap();
}
