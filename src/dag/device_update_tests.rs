//! Host tests of device-updatable kernel nodes: the lowering transcript (the attribute's handle
//! written into the kernels that update the node: directly when they come after it, by
//! `cudaGraphKernelNodeSetParams` once every node exists when they come before), the DAG
//! keeping its placeholders, every validation rule with its error naming the node (a handle of
//! another DAG, device nodes in child graphs, placement, a removed node), the builder's
//! refusal of non-kernel nodes, the refusals of stream launches and `Exec` updates, and DOT.

use super::*;
use crate::device::DeviceLimits;
use crate::kernel::{DeviceNode, Kernel};
use crate::memory::DeviceBuffer;
use crate::{args, KernelArg, LaunchConfig};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

fn validate(dag: &Dag, r: &RecordingBackend) -> Result<()> {
    use crate::dag::nodes::backend::sealed::Lower;
    dag.validate_on(&ValidationTarget::new(r.key(), r.limits(), r, true))
}

fn hex_le(v: u64) -> String {
    v.to_le_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// `size(cudaGraphDeviceNode_t next, const int* n)` -> `work(float* x)`, the second
/// device-updatable: the DAG, both nodes, the handle.
struct Sized {
    dag: Dag,
    size: NodeId,
    work: NodeId,
    handle: DeviceNode,
}

fn sized(size_k: &Kernel, work_k: &Kernel, n: &DeviceBuffer<i32>, x: &DeviceBuffer<f32>) -> Sized {
    let mut dag = Dag::new();
    let work = dag
        .add_kernel(work_k, LaunchConfig::new(1, 256), &args![x])
        .unwrap();
    dag.set_name(work, "work");
    let handle = dag.device_node(work).unwrap();
    let size = dag
        .add_kernel(size_k, LaunchConfig::new(1, 1), &args![&handle, n])
        .unwrap();
    dag.set_name(size, "size");
    dag.add_dependency(size, work).unwrap();
    Sized {
        dag,
        size,
        work,
        handle,
    }
}

fn kernels(r: &mut RecordingBackend) -> (Kernel, Kernel, DeviceBuffer<i32>, DeviceBuffer<f32>) {
    (
        r.kernel("size", &[8, 8]),
        r.kernel("work", &[8]),
        r.device_buffer::<i32>(1),
        r.device_buffer::<f32>(4096),
    )
}

#[test]
fn an_earlier_kernel_is_given_the_handle_once_the_node_it_updates_exists() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let s = sized(&ks, &kw, &n, &x);
    s.dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    let n_addr = hex_le(n.alloc.ptr);
    // The updating kernel comes first (it decides), with a null handle...
    assert_eq!(
        lines[0],
        format!(
            "0 cudaGraphAddKernelNode kernel `size` deps=[] kernel=size grid=(1,1,1) \
             block=(1,1,1) smem=0 args=[0000000000000000,{n_addr}]"
        ),
        "{t}"
    );
    // ... the updated node is made device-updatable and gets its handle ...
    assert!(
        lines[1].starts_with("1 cudaGraphAddKernelNode kernel `work` deps=[0] kernel=work"),
        "{t}"
    );
    assert!(
        lines[1].ends_with("device_updatable=#0 dev_node=0xde000000000"),
        "{t}"
    );
    // ... which the first kernel is given once every node exists.
    let handle = hex_le(0xde0_0000_0000);
    assert_eq!(
        lines[2],
        format!(
            "2 cudaGraphKernelNodeSetParams kernel `size` deps=[0] kernel=size grid=(1,1,1) \
             block=(1,1,1) smem=0 args=[{handle},{n_addr}]"
        ),
        "{t}"
    );
    // The DAG keeps its placeholder.
    let Op::Kernel(k) = s.dag.node(s.size).unwrap().op() else {
        panic!("a kernel node")
    };
    assert_eq!(k.arg_bytes(0), &0u64.to_ne_bytes());
    assert_eq!(s.handle.index(), 0);
    assert_eq!(s.dag.device_updatable_node().as_deref(), Some("work"));
}

#[test]
fn a_later_kernel_gets_the_handle_when_it_is_added() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let mut dag = Dag::new();
    let first = dag
        .add_kernel(&kw, LaunchConfig::new(1, 32), &args![&x])
        .unwrap();
    let second = dag
        .add_kernel(&kw, LaunchConfig::new(1, 32), &args![&x])
        .unwrap();
    let h0 = dag.device_node(first).unwrap();
    let h1 = dag.device_node(second).unwrap();
    // Asking again gives the same handle.
    assert_eq!(dag.device_node(second).unwrap(), h1);
    assert_eq!((h0.index(), h1.index()), (0, 1));
    let after = dag
        .add_kernel(&ks, LaunchConfig::new(1, 1), &args![&h1, &n])
        .unwrap();
    dag.chain(&[first, second, after]).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    assert_eq!(t.lines().count(), 3, "no SetParams call: {t}");
    assert!(
        t.contains("device_updatable=#0 dev_node=0xde000000000"),
        "{t}"
    );
    assert!(
        t.contains("device_updatable=#1 dev_node=0xde000000100"),
        "{t}"
    );
    assert!(
        t.contains(&format!(
            "args=[{},{}]",
            hex_le(0xde0_0000_0100),
            hex_le(n.alloc.ptr)
        )),
        "{t}"
    );
}

/// The node a `WrongKind` error names and its problem.
fn wrong_kind(e: Error) -> (String, String) {
    match e {
        Error::Dag(DagError::WrongKind { node, problem }) => (node, problem),
        other => panic!("not a wrong-kind error: {other}"),
    }
}

#[test]
fn only_kernel_nodes_can_be_device_updatable() {
    let mut dag = Dag::new();
    let e = dag.add_empty();
    let (node, problem) = wrong_kind(dag.device_node(e).unwrap_err());
    assert_eq!(node, "empty#0");
    assert!(problem.contains("a kernel node"), "{problem}");
}

#[test]
fn a_handle_of_another_dag_is_refused_naming_the_kernel() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let s = sized(&ks, &kw, &n, &x);
    let mut other = Dag::new();
    let u = other
        .add_kernel(&ks, LaunchConfig::new(1, 1), &args![&s.handle, &n])
        .unwrap();
    other.set_name(u, "stranger");
    let (node, problem) = wrong_kind(validate(&other, &r).unwrap_err());
    assert_eq!(node, "stranger");
    assert!(
        problem.contains("device node #0 of another DAG"),
        "{problem}"
    );
    // Its own DAG is fine.
    validate(&s.dag, &r).unwrap();
}

#[test]
fn device_nodes_inside_a_child_graph_are_refused_by_path() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let s = sized(&ks, &kw, &n, &x);
    let mut parent = Dag::new();
    let c = parent.add_child(&s.dag);
    parent.set_name(c, "inner");
    let (node, problem) = wrong_kind(validate(&parent, &r).unwrap_err());
    assert!(node == "inner/work" || node == "inner/size", "{node}");
    assert!(problem.contains("inside a child graph"), "{problem}");
}

#[test]
fn placed_nodes_are_refused_naming_them() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let ks = r.kernel_on(1, "size", &[8, 8]);
    let kw = r.kernel_on(1, "work", &[8]);
    let (k0s, k0w) = (r.kernel("size", &[8, 8]), r.kernel("work", &[8]));
    let n = r.device_buffer::<i32>(1);
    let x = r.device_buffer::<f32>(4096);
    // The updated node placed on device 1.
    let mut s = sized(&k0s, &kw, &n, &x);
    s.dag.place_on(s.work, r.device_key(1)).unwrap();
    let (node, problem) = wrong_kind(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "work");
    assert!(problem.contains("placed on"), "{problem}");
    // The updating kernel placed on device 1.
    let mut s = sized(&ks, &k0w, &n, &x);
    s.dag.place_on(s.size, r.device_key(1)).unwrap();
    let (node, problem) = wrong_kind(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "size");
    assert!(
        problem.contains("updates only nodes of its own device"),
        "{problem}"
    );
}

#[test]
fn a_removed_device_node_is_refused_in_the_kernel_passing_it() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let mut s = sized(&ks, &kw, &n, &x);
    s.dag.remove(s.work).unwrap();
    let (node, problem) = wrong_kind(validate(&s.dag, &r).unwrap_err());
    assert_eq!(node, "size");
    assert!(problem.contains("was removed"), "{problem}");
    // Without the kernel passing it, nothing is left to refuse.
    s.dag.remove(s.size).unwrap();
    validate(&s.dag, &r).unwrap();
}

#[test]
fn stream_launches_and_exec_updates_cannot_pass_or_replace_a_handle() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let s = sized(&ks, &kw, &n, &x);
    let handle = KernelArg::from(&s.handle);
    let p = ks
        .args_problem(&[handle.clone(), KernelArg::from(&n)])
        .unwrap();
    assert!(p.contains("device-updatable kernel node's handle"), "{p}");
    let d = &s.dag.device_nodes;
    let value = KernelArg::from(&n);
    // The other argument may change; the handle can be neither passed nor replaced.
    assert!(d
        .exec_update_problem(s.size, [(1, &value)].into_iter())
        .is_none());
    let p = d
        .exec_update_problem(s.size, [(0, &value)].into_iter())
        .unwrap();
    assert!(p.contains("cannot replace"), "{p}");
    let p = d
        .exec_update_problem(s.work, [(0, &handle)].into_iter())
        .unwrap();
    assert!(p.contains("keep the handles"), "{p}");
}

#[test]
fn dot_shows_the_device_updatable_node_and_its_updaters() {
    let mut r = rec();
    let (ks, kw, n, x) = kernels(&mut r);
    let s = sized(&ks, &kw, &n, &x);
    let dot = s.dag.to_dot();
    assert!(
        dot.contains("device-updatable (device node #0), by size"),
        "{dot}"
    );
    assert!(
        dot.contains(crate::dag::nodes::device_update::DOT_COLOR),
        "{dot}"
    );
    // Only the updated node is drawn so.
    assert_eq!(dot.matches("device-updatable").count(), 1, "{dot}");
    if let Some((svg, stderr)) = super::tests::graphviz_svg(&dot) {
        assert!(stderr.is_empty(), "{stderr}\n{dot}");
        assert!(svg.contains("device node #0"), "{svg}");
    }
}
