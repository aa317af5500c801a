//! Host tests of event record and wait nodes: lowering (through the recording backend),
//! validation of the event's device, DOT, updates in the DAG, and keeping the event alive.

use super::*;
use crate::device::DeviceLimits;
use crate::{args, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

#[test]
fn event_nodes_lower_as_generic_nodes_after_their_dependencies() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(256);
    let k = r.kernel("scale", &[8, 4]);
    let (e1, e2) = (r.event(), r.event());
    let mut dag = Dag::new();
    let wait = dag.add_event_wait(&e1);
    let a = dag
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&x, 2.0f32])
        .unwrap();
    let record = dag.add_event_record(&e2);
    dag.chain(&[wait, a, record]).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(
        lines[0].starts_with("0 cudaGraphAddNode event_wait `wait#0` deps=[] event=")
            && lines[0].ends_with(&format!("{:#x}", e1.raw() as usize)),
        "{t}"
    );
    assert!(lines[1].contains("kernel `kernel#1` deps=[0]"), "{t}");
    assert!(
        lines[2].starts_with("2 cudaGraphAddNode event_record `record#2` deps=[1] event=")
            && lines[2].ends_with(&format!("{:#x}", e2.raw() as usize)),
        "{t}"
    );
}

#[test]
fn a_record_node_records_an_event_of_its_own_device_and_a_wait_node_any_of_the_backend() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let other = r.event_on(1);
    let mut dag = Dag::new();
    let rec_node = dag.add_event_record(&other);
    dag.set_name(rec_node, "signal");
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::WrongDevice { node: Some(node), .. } if node == "signal"),
        "{err}"
    );
    assert!(err.to_string().contains("own device"), "{err}");
    // Waiting for another device's event is fine.
    let mut dag = Dag::new();
    dag.add_event_wait(&other);
    dag.lower(&mut r).unwrap();
    // An event of another backend is not.
    let foreign = rec().event();
    let mut dag = Dag::new();
    let w = dag.add_event_wait(&foreign);
    dag.set_name(w, "alien");
    let err = dag.lower(&mut r).unwrap_err();
    assert!(
        matches!(&err, Error::WrongDevice { node: Some(node), .. } if node == "alien"),
        "{err}"
    );
}

#[test]
fn event_nodes_keep_their_event_alive_and_can_change_it() {
    let mut r = rec();
    let (e1, e2) = (r.event(), r.event());
    let mut dag = Dag::new();
    let n = dag.add_event_record(&e1);
    assert_eq!(Arc::strong_count(&e1.inner), 2, "the node holds a clone");
    dag.set_event(n, &e2).unwrap();
    assert_eq!(Arc::strong_count(&e1.inner), 1);
    assert_eq!(Arc::strong_count(&e2.inner), 2);
    let copy = dag.clone();
    assert_eq!(Arc::strong_count(&e2.inner), 3);
    drop((dag, copy));
    assert_eq!(Arc::strong_count(&e2.inner), 1);
    // Only event nodes have an event.
    let mut dag = Dag::new();
    let empty = dag.add_empty();
    let err = dag.set_event(empty, &e1).unwrap_err().to_string();
    assert!(err.contains("not an event record or wait node"), "{err}");
}

#[test]
fn event_nodes_are_drawn_with_what_they_do() {
    let mut r = rec();
    let e = r.event();
    let mut dag = Dag::new();
    let a = dag.add_event_record(&e);
    let b = dag.add_event_wait(&e);
    dag.add_dependency(a, b).unwrap();
    let dot = dag.to_dot();
    let handle = format!("{:#x}", e.raw() as usize);
    assert!(
        dot.contains(&format!("record#0\\nrecord event {handle}\", shape=cds")),
        "{dot}"
    );
    assert!(
        dot.contains(&format!(
            "wait#1\\nwait for event {handle}\", shape=invhouse"
        )),
        "{dot}"
    );
}

#[test]
fn a_placeholder_event_is_never_passed_to_cuda() {
    let e = rec().event();
    assert!(e.query().is_err());
    assert!(e.synchronize().is_err());
    assert!(e.elapsed_ms(&e.clone()).is_err());
    assert_eq!(e, e.clone());
    assert_ne!(e, rec().event());
}
