//! Host tests of the enabled flag (issue 26, defect 3): a node disabled in the DAG is disabled
//! after instantiation (the recording backend records the call), a child graph cannot carry
//! disabled nodes, and an update's or re-instantiation's DAG takes the executable graph's flags.

use super::tests::rec;
use super::*;
use crate::args;
use crate::LaunchConfig;

/// A kernel, a memset and a captured node, then an empty node after all three.
fn three_disableable(r: &mut RecordingBackend) -> (Dag, [NodeId; 4]) {
    let x = r.device_buffer::<f32>(64);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let a = dag
        .add_kernel(&k, LaunchConfig::new(1, 64), &args![&x])
        .unwrap();
    let m = dag.add_memset(&x, 0u32).unwrap();
    // SAFETY: the work enqueues nothing (the recording backend never calls it anyway).
    let c = unsafe { dag.add_captured("library call", [crate::Region::from(&x)], |_| Ok(())) };
    let j = dag.add_empty();
    dag.chain(&[a, m, c, j]).unwrap();
    (dag, [a, m, c, j])
}

#[test]
fn disabled_nodes_are_disabled_after_every_node_was_added() {
    let mut r = rec();
    let (mut dag, [a, m, c, _]) = three_disableable(&mut r);
    dag.lower(&mut r).unwrap();
    assert!(
        r.calls()
            .iter()
            .all(|c| c.function != "cudaGraphNodeSetEnabled"),
        "an all-enabled DAG disables nothing:\n{}",
        r.transcript()
    );
    // What `Exec::set_enabled` does to the Exec's DAG (a clone of which is instantiated).
    for id in [c, a] {
        dag.node_mut(id).unwrap().enabled = false;
    }
    r.clear();
    dag.lower(&mut r).unwrap();
    let calls = r.calls();
    assert_eq!(calls.len(), 6, "{}", r.transcript());
    let disabled: Vec<_> = calls[4..]
        .iter()
        .map(|c| {
            (
                c.function,
                c.kind,
                c.name.as_str(),
                c.deps.clone(),
                c.params.as_str(),
            )
        })
        .collect();
    assert_eq!(
        disabled,
        [
            (
                "cudaGraphNodeSetEnabled",
                "kernel",
                "kernel#0",
                vec![0],
                "enabled=0"
            ),
            (
                "cudaGraphNodeSetEnabled",
                "captured",
                "captured#2",
                vec![2],
                "enabled=0"
            ),
        ],
        "{}",
        r.transcript()
    );
    assert!(dag.node(m).unwrap().is_enabled());
}

#[test]
fn a_child_graph_with_a_disabled_node_is_refused() {
    let mut r = rec();
    let (mut child, [a, ..]) = three_disableable(&mut r);
    child.node_mut(a).unwrap().enabled = false;
    let mut dag = Dag::new();
    let ch = dag.add_child(&child);
    dag.set_name(ch, "stage");
    let e = dag.lower(&mut r).unwrap_err().to_string();
    assert!(
        e.contains("stage") && e.contains("kernel#0") && e.contains("is disabled"),
        "{e}"
    );
    // Lowered on its own, the same DAG disables the node.
    child.lower(&mut r).unwrap();
}

#[test]
fn kept_flags_follow_the_nodes_by_id_and_kind() {
    let mut r = rec();
    let (mut exec_dag, [a, m, c, j]) = three_disableable(&mut r);
    exec_dag.node_mut(m).unwrap().enabled = false;
    // The new DAG: same nodes, its own flags (kernel disabled, memset enabled), one more node.
    let mut new = exec_dag.clone();
    new.node_mut(m).unwrap().enabled = true;
    new.node_mut(a).unwrap().enabled = false;
    let extra = new.add_empty();
    exec::keep_enabled_flags(&mut new, &exec_dag);
    assert!(!new.node(m).unwrap().is_enabled(), "the Exec's flag");
    assert!(new.node(a).unwrap().is_enabled(), "the Exec's flag");
    for id in [c, j, extra] {
        assert!(new.node(id).unwrap().is_enabled());
    }
    // A node of another kind under the same id (a rebuilt DAG) keeps its own flag.
    let mut other = Dag::new();
    let e0 = other.add_empty();
    let mut exec_dag = Dag::new();
    let x = r.device_buffer::<f32>(4);
    let k0 = exec_dag.add_memset(&x, 0u32).unwrap();
    exec_dag.node_mut(k0).unwrap().enabled = false;
    exec::keep_enabled_flags(&mut other, &exec_dag);
    assert!(other.node(e0).unwrap().is_enabled());
}
