//! Host tests of kernel launch attributes: what they lower to, the checks when they are set
//! (against the node's shape) and when the DAG is validated (against the device), DOT, and the
//! access-policy window's buffer kept alive and checked for reach.

use super::tests::rec;
use super::*;
use crate::device::DeviceLimits;
use crate::{AccessPolicy, AccessProperty, Dim3, LaunchAttributes, LaunchConfig, MemSyncDomain};

fn shape_error(e: Error) -> (String, String) {
    match e {
        Error::LaunchShape {
            node: Some(node),
            problem,
            ..
        } => (node, problem),
        other => panic!("not a launch-shape error: {other}"),
    }
}

#[test]
fn every_attribute_is_lowered_after_the_launch() {
    let mut r = rec();
    let k = r.kernel("k", &[]);
    let x = r.device_buffer::<u8>(1 << 20);
    let mut dag = Dag::new();
    let a = dag
        .add_kernel(&k, LaunchConfig::new((4, 2, 1), 128), &[])
        .unwrap();
    let window = x.region(4096..8192);
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            priority: Some(-1),
            cluster: Some(Dim3::from((2, 2, 1))),
            cooperative: true,
            shared_mem_carveout: Some(50),
            access_policy: Some(AccessPolicy {
                window: window.clone(),
                hit_ratio: 0.5,
                hit: AccessProperty::Persisting,
                miss: AccessProperty::Streaming,
            }),
            mem_sync_domain: Some(MemSyncDomain::Remote),
        },
    )
    .unwrap();
    dag.lower(&mut r).unwrap();
    let p = &r.calls()[0].params;
    let base = window.alloc.ptr + window.offset as u64;
    assert!(
        p.ends_with(&format!(
            "priority=-1 cluster=(2,2,1) cooperative carveout=50 window={base:#x}+4096:0.5:persisting:streaming sync_domain=remote"
        )),
        "{p}"
    );
    // The priority alone keeps the others.
    dag.set_priority(a, 3).unwrap();
    let k = match dag.node(a).unwrap().op() {
        Op::Kernel(k) => k.clone(),
        _ => unreachable!(),
    };
    let attrs = k.attributes().unwrap();
    assert_eq!(attrs.priority, Some(3));
    assert!(attrs.cooperative && attrs.cluster == Some(Dim3::from((2, 2, 1))));
    // Setting none makes the node plain again.
    dag.set_launch_attributes(a, LaunchAttributes::default())
        .unwrap();
    r.clear();
    dag.lower(&mut r).unwrap();
    assert!(
        r.calls()[0].params.ends_with("args=[]"),
        "{}",
        r.calls()[0].params
    );
}

#[test]
fn attributes_that_do_not_fit_the_shape_are_refused_when_set() {
    let mut r = rec();
    let k = r.kernel("k", &[]);
    let host = r.host_buffer::<u8>(4096);
    let dev = r.device_buffer::<u8>(4096);
    let mut dag = Dag::new();
    let a = dag
        .add_kernel(&k, LaunchConfig::new((6, 1, 1), 64), &[])
        .unwrap();
    dag.set_name(a, "stencil");
    let cases: Vec<(LaunchAttributes, &str)> = vec![
        (
            LaunchAttributes {
                cluster: Some(Dim3::from((4, 1, 1))),
                ..Default::default()
            },
            "cluster.x = 4 does not divide grid.x = 6",
        ),
        (
            LaunchAttributes {
                cluster: Some(Dim3::from((0, 1, 1))),
                ..Default::default()
            },
            "zero dimension",
        ),
        (
            LaunchAttributes {
                shared_mem_carveout: Some(101),
                ..Default::default()
            },
            "over 100%",
        ),
        (
            LaunchAttributes {
                access_policy: Some(AccessPolicy {
                    window: dev.region(..),
                    hit_ratio: 1.5,
                    hit: AccessProperty::Persisting,
                    miss: AccessProperty::Normal,
                }),
                ..Default::default()
            },
            "hit ratio 1.5",
        ),
        (
            LaunchAttributes {
                access_policy: Some(AccessPolicy {
                    window: host.region(..),
                    hit_ratio: 0.5,
                    hit: AccessProperty::Persisting,
                    miss: AccessProperty::Normal,
                }),
                ..Default::default()
            },
            "must be device memory",
        ),
        (
            LaunchAttributes {
                access_policy: Some(AccessPolicy {
                    window: dev.region(8..8),
                    hit_ratio: 0.5,
                    hit: AccessProperty::Persisting,
                    miss: AccessProperty::Normal,
                }),
                ..Default::default()
            },
            "window is empty",
        ),
    ];
    for (attrs, want) in cases {
        let (node, problem) = shape_error(dag.set_launch_attributes(a, attrs).unwrap_err());
        assert_eq!(node, "stencil");
        assert!(problem.contains(want), "{problem} (wanted {want})");
        assert!(
            dag.node(a)
                .map(|n| match n.op() {
                    Op::Kernel(k) => k.attributes().is_none(),
                    _ => false,
                })
                .unwrap(),
            "a refused set leaves the node as it was"
        );
    }
    // Nine blocks in a cluster are more than the portable eight.
    let b = dag
        .add_kernel(&k, LaunchConfig::new((9, 1, 1), 64), &[])
        .unwrap();
    let (_, problem) = shape_error(
        dag.set_launch_attributes(
            b,
            LaunchAttributes {
                cluster: Some(Dim3::from((9, 1, 1))),
                ..Default::default()
            },
        )
        .unwrap_err(),
    );
    assert!(problem.contains("more than the portable 8"), "{problem}");
    // A cluster as large as the grid's largest: its block count (2^96) is over u64 and was a
    // multiply overflow (found by fuzzing); it saturates and is refused the same way.
    let max = (u32::MAX, u32::MAX, u32::MAX);
    let c = dag.add_kernel(&k, LaunchConfig::new(max, 64), &[]).unwrap();
    let (_, problem) = shape_error(
        dag.set_launch_attributes(
            c,
            LaunchAttributes {
                cluster: Some(Dim3::from(max)),
                ..Default::default()
            },
        )
        .unwrap_err(),
    );
    assert!(problem.contains("more than the portable 8"), "{problem}");
}

#[test]
fn device_dependent_attributes_are_checked_when_validating() {
    let k_for = |r: &RecordingBackend| r.kernel("k", &[]);
    // Clusters need compute capability 9.0.
    let mut ampere = DeviceLimits::hopper();
    ampere.compute_capability = (8, 0);
    let mut r = RecordingBackend::new(ampere);
    let k = k_for(&r);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(4, 64), &[]).unwrap();
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            cluster: Some(Dim3::from((2, 1, 1))),
            ..Default::default()
        },
    )
    .unwrap();
    let (node, problem) = shape_error(dag.lower(&mut r).unwrap_err());
    assert_eq!(node, "kernel#0");
    assert!(problem.contains("compute capability 9.0"), "{problem}");
    // A window larger than the device allows.
    let mut small = DeviceLimits::hopper();
    small.max_access_policy_window = 1024;
    let mut r = RecordingBackend::new(small);
    let k = k_for(&r);
    let x = r.device_buffer::<u8>(4096);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(4, 64), &[]).unwrap();
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            access_policy: Some(AccessPolicy {
                window: x.region(..2048),
                hit_ratio: 1.0,
                hit: AccessProperty::Persisting,
                miss: AccessProperty::Streaming,
            }),
            ..Default::default()
        },
    )
    .unwrap();
    let (_, problem) = shape_error(dag.lower(&mut r).unwrap_err());
    assert!(
        problem.contains("2048 bytes is larger than the device's 1024"),
        "{problem}"
    );
    // A shape changed after the attributes were set is checked again.
    let mut r = rec();
    let k = k_for(&r);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(4, 64), &[]).unwrap();
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            cluster: Some(Dim3::from((2, 1, 1))),
            ..Default::default()
        },
    )
    .unwrap();
    dag.lower(&mut r).unwrap();
    dag.set_launch_config(a, LaunchConfig::new(5, 64)).unwrap();
    let (_, problem) = shape_error(dag.lower(&mut r).unwrap_err());
    assert!(problem.contains("does not divide grid.x = 5"), "{problem}");
}

#[test]
fn the_window_buffer_is_kept_alive_and_must_be_reachable() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    r.set_peer_access(0, 1, false);
    let k = r.kernel("k", &[]);
    let far = r.device_buffer_on::<u8>(1, 4096);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(1, 64), &[]).unwrap();
    let before = Arc::strong_count(&far.region(..).alloc);
    let attrs = LaunchAttributes {
        access_policy: Some(AccessPolicy {
            window: far.region(..),
            hit_ratio: 1.0,
            hit: AccessProperty::Persisting,
            miss: AccessProperty::Streaming,
        }),
        ..Default::default()
    };
    dag.set_launch_attributes(a, attrs).unwrap();
    assert_eq!(
        Arc::strong_count(&far.region(..).alloc),
        before + 1,
        "the node holds the window's buffer"
    );
    let mut held = 0;
    dag.node(a)
        .unwrap()
        .op()
        .for_each_allocation(&mut |_| held += 1);
    assert_eq!(held, 1, "the Exec's hold pass sees the window's buffer");
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::WrongDevice { .. })
            && err.to_string().contains("access-policy window's buffer"),
        "{err}"
    );
}

#[test]
fn attributes_are_drawn() {
    let r = rec();
    let k = r.kernel("k", &[]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(2, 64), &[]).unwrap();
    dag.set_launch_attributes(
        a,
        LaunchAttributes {
            cluster: Some(Dim3::from((2, 1, 1))),
            cooperative: true,
            mem_sync_domain: Some(MemSyncDomain::Remote),
            ..Default::default()
        },
    )
    .unwrap();
    let dot = dag.to_dot();
    assert!(
        dot.contains("\\ncluster (2,1,1)\\ncooperative\\nsync domain remote\""),
        "{dot}"
    );
}
