//! Host-only tests of the builder, validation, lowering (through the recording backend) and DOT.

use super::*;
use crate::args;
use crate::device::DeviceLimits;
use crate::{LaunchConfig, Region};
use nodes::host::host_trampoline;

pub(super) fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

/// Lowers `dag` to a fresh recording backend and compares the transcript with `expect`
/// (addresses rewritten relative to the first placeholder, so the text is stable).
fn check(dag: &Dag, rec: &mut RecordingBackend, expect: &str) {
    rec.clear();
    dag.lower(rec).unwrap();
    let got = rec.transcript();
    let got = got.replace("0x70000000", "@");
    assert_eq!(got.trim(), expect.trim(), "transcript:\n{got}");
}

#[test]
fn lowering_order_dependencies_and_parameters() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(256);
    let h = r.host_buffer::<f32>(256);
    let k = r.kernel("scale", &[8, 4]);
    let mut dag = Dag::new();
    let up = dag.add_copy(dst(&x), src(&h)).unwrap();
    let a = dag
        .add_kernel(&k, LaunchConfig::new(1, 256), &args![&x, 2.0f32])
        .unwrap();
    let b = dag
        .add_kernel(&k, LaunchConfig::new(2, 128), &args![&x, 3.0f32])
        .unwrap();
    let join = dag.add_empty();
    let down = dag.add_copy(dst(&h), src(&x)).unwrap();
    dag.set_name(up, "upload");
    dag.fan_out(up, &[a, b]).unwrap();
    dag.fan_in(&[a, b], join).unwrap();
    dag.add_dependency(join, down).unwrap();
    check(
        &dag,
        &mut r,
        "
0 cudaGraphAddMemcpyNode1D memcpy `upload` deps=[] dst=@0000 src=@0400 bytes=1024 kind=HostToDevice
1 cudaGraphAddKernelNode kernel `kernel#1` deps=[0] kernel=scale grid=(1,1,1) block=(256,1,1) smem=0 args=[0000000000700000,00000040]
2 cudaGraphAddKernelNode kernel `kernel#2` deps=[0] kernel=scale grid=(2,1,1) block=(128,1,1) smem=0 args=[0000000000700000,00004040]
3 cudaGraphAddNode empty `empty#3` deps=[1, 2] 
4 cudaGraphAddMemcpyNode1D memcpy `memcpy#4` deps=[3] dst=@0400 src=@0000 bytes=1024 kind=DeviceToHost",
    );
}

#[test]
fn memset_and_2d_copies_lower_with_pitches() {
    let mut r = rec();
    let d = r.device_buffer::<u16>(64 * 8);
    let s = r.device_buffer::<u16>(32 * 8);
    let mut dag = Dag::new();
    let m = dag.add_memset(d.region(..64), 0xabcdu16).unwrap();
    let m2 = dag
        .add_memset_2d(Memset2d {
            dst: d.region(64..),
            pitch: 64,
            width: 16,
            height: 4,
            value: 7u32.into(),
        })
        .unwrap();
    let c = dag
        .add_memcpy_2d(Copy2d {
            dst: d.region(..),
            dst_pitch: 64,
            src: s.region(..),
            src_pitch: 32,
            width: 32,
            height: 8,
        })
        .unwrap();
    dag.chain(&[m, m2, c]).unwrap();
    check(
        &dag,
        &mut r,
        "
0 cudaGraphAddNode memset `memset#0` deps=[] dst=@0000 value=0xabcd element_size=2 width=64 height=1 pitch=128
1 cudaGraphAddNode memset `memset#1` deps=[0] dst=@0080 value=0x7 element_size=4 width=8 height=4 pitch=128
2 cudaGraphAddNode memcpy `memcpy#2` deps=[1] dst=@0000 dst_pitch=128 src=@0400 src_pitch=64 width=64 height=8 depth=1 kind=DeviceToDevice",
    );
}

#[test]
fn child_graphs_and_host_nodes_lower() {
    let mut r = rec();
    let k = r.kernel("k", &[]);
    let mut child = Dag::new();
    let c1 = child.add_kernel(&k, LaunchConfig::new(1, 32), &[]).unwrap();
    let c2 = child.add_empty();
    child.add_dependency(c1, c2).unwrap();
    let mut dag = Dag::new();
    let h = dag.add_host(|| {});
    let ch = dag.add_child(&child);
    dag.add_dependency(h, ch).unwrap();
    check(
        &dag,
        &mut r,
        "
0 cudaGraphAddNode host `host#0` deps=[] 
1 cudaGraphAddNode graph `child#1` deps=[0] child=[cudaGraphAddKernelNode kernel `kernel#0` deps=[]; cudaGraphAddNode empty `empty#1` deps=[0]]",
    );
}

#[test]
fn cycles_are_rejected_with_their_nodes() {
    let mut dag = Dag::new();
    let a = dag.add_empty();
    let b = dag.add_empty();
    let c = dag.add_empty();
    dag.set_name(a, "a");
    dag.set_name(b, "b");
    dag.set_name(c, "c");
    dag.chain(&[a, b, c]).unwrap();
    let e = dag.add_dependency(c, a).unwrap_err();
    assert_eq!(
        e.to_string(),
        "dependency would create a cycle: c -> a -> b -> c"
    );
    match e {
        Error::Dag(DagError::Cycle { nodes }) => assert_eq!(nodes, ["c", "a", "b", "c"]),
        other => panic!("{other:?}"),
    }
    let e = dag.add_dependency(b, b).unwrap_err();
    assert_eq!(e.to_string(), "dependency would create a cycle: b -> b");
    // Nothing was added by the failed calls.
    assert_eq!(dag.edge_count(), 2);
    // A repeated edge is harmless.
    dag.add_dependency(a, b).unwrap();
    assert_eq!(dag.edge_count(), 2);
}

#[test]
fn unknown_nodes_are_errors() {
    let mut dag = Dag::new();
    let a = dag.add_empty();
    let b = dag.add_empty();
    dag.remove(b).unwrap();
    let e = dag.add_dependency(a, b).unwrap_err();
    assert!(matches!(e, Error::Dag(DagError::UnknownNode(1))), "{e}");
    // The next node takes b's slot in the petgraph graph, but b's id stays dead.
    let c = dag.add_empty();
    assert_eq!(c.index(), b.index(), "petgraph reuses the slot");
    assert_ne!(c, b);
    assert!(dag.node(b).is_err());
    assert!(dag.set_kernel_args(b, &[]).is_err());
    assert!(dag.remove(b).is_err());
    assert_eq!(
        dag.node(c).unwrap().name(),
        "empty#2",
        "named by serial, not slot"
    );
    dag.add_dependency(a, c).unwrap();
    // Errors for a node not yet added name it as it would have been named.
    let r = rec();
    let x = r.kernel("k", &[4]);
    let e = dag
        .add_kernel(&x, LaunchConfig::new(1, 1), &args![])
        .unwrap_err();
    assert!(e.to_string().starts_with("node `kernel#3`"), "{e}");
}

#[test]
fn lowering_order_does_not_depend_on_edge_insertion_order() {
    let mut r = rec();
    let x = r.device_buffer::<u32>(4);
    let k = r.kernel("w", &[8, 4, 4]);
    let build = |swap: bool| {
        let mut dag = Dag::new();
        let root = dag.add_memset(&x, 0u32).unwrap();
        let a = dag
            .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, 0u32, 1u32])
            .unwrap();
        let b = dag
            .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, 1u32, 2u32])
            .unwrap();
        let c = dag
            .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, 2u32, 3u32])
            .unwrap();
        let join = dag.add_empty();
        if swap {
            dag.fan_out(root, &[c, b, a]).unwrap();
            dag.fan_in(&[b, c, a], join).unwrap();
        } else {
            dag.fan_out(root, &[a, b, c]).unwrap();
            dag.fan_in(&[a, b, c], join).unwrap();
        }
        dag
    };
    let (one, two) = (build(false), build(true));
    one.lower(&mut r).unwrap();
    let first = r.transcript();
    r.clear();
    two.lower(&mut r).unwrap();
    assert_eq!(first, r.transcript());
    assert_eq!(one.edge_serials(), two.edge_serials());
    assert!(first.contains("`empty#4` deps=[1, 2, 3]"), "{first}");
}

#[test]
fn overlapping_copies_are_rejected() {
    let mut r = rec();
    let x = r.device_buffer::<u8>(1024);
    let mut dag = Dag::new();
    let e = dag
        .add_copy(dst(x.region(100..200)), src(x.region(150..250)))
        .unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
    dag.add_copy(dst(x.region(0..100)), src(x.region(100..200)))
        .unwrap();
    // 2D: even rows into odd rows of one buffer do not overlap; the same rows do.
    let rows = |dst: usize, src: usize| Copy2d {
        dst: x.region(dst..),
        dst_pitch: 64,
        src: x.region(src..),
        src_pitch: 64,
        width: 32,
        height: 8,
    };
    dag.add_memcpy_2d(rows(32, 0)).unwrap();
    let e = dag.add_memcpy_2d(rows(16, 0)).unwrap_err();
    assert!(e.to_string().contains("overlap"), "{e}");
}

#[test]
fn pitched_sizes_that_overflow_are_errors() {
    // Found by the `dag` fuzz target (fuzz/): a 2D memset or copy whose width or pitch in
    // bytes overflows usize panicked (multiplication overflow) instead of being refused.
    let mut r = rec();
    let x = r.device_buffer::<u32>(64);
    let y = r.device_buffer::<u32>(64);
    let mut dag = Dag::new();
    for (width, pitch) in [(usize::MAX / 2, 1), (1, usize::MAX / 2)] {
        let e = dag
            .add_memset_2d(Memset2d {
                dst: x.region(..),
                pitch,
                width,
                height: 2,
                value: 0u32.into(),
            })
            .unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        let e = dag
            .add_memcpy_2d(Copy2d {
                dst: x.region(..),
                dst_pitch: pitch,
                src: y.region(..),
                src_pitch: pitch,
                width,
                height: 2,
            })
            .unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
    }
    assert_eq!(dag.node_count(), 0);
}

#[test]
fn regions_far_past_their_buffer_have_an_address() {
    // Found by the `dag` fuzz target (fuzz/): the address of a region starting past the end
    // of the address space (`region(usize::MAX..)`) overflowed when taken, for a kernel
    // argument or a captured node's description, instead of wrapping as addresses do.
    let mut r = rec();
    let x = r.device_buffer::<u32>(4);
    let far = x.region(usize::MAX..);
    assert_eq!(crate::KernelArg::from(&far).size(), 8);
    let mut dag = Dag::new();
    // SAFETY: the work enqueues nothing (and a recording backend never calls it).
    unsafe { dag.add_captured("far", [far.clone()], |_| Ok(())) };
    dag.lower(&mut r).unwrap();
    assert_eq!(r.calls()[0].kind, "captured");
}

#[test]
fn captured_uses_of_any_length_are_drawn() {
    // Found by the `dag` fuzz target (fuzz/): the DOT label of a captured node summed the
    // lengths of the regions it declares, which overflowed for regions reaching past the
    // address space (the declared uses are not bounds-checked).
    let mut r = rec();
    let x = r.device_buffer::<u32>(4);
    let mut dag = Dag::new();
    let huge = [x.region(0..usize::MAX), x.region(1..usize::MAX)];
    // SAFETY: the work enqueues nothing (and a recording backend never calls it).
    unsafe { dag.add_captured("huge", huge, |_| Ok(())) };
    assert!(dag.to_dot().contains("uses 2 buffers"), "{}", dag.to_dot());
}

#[test]
fn tall_copies_within_one_buffer_are_refused_at_once() {
    // Found by the `dag` fuzz target (fuzz/) as a hang: a 2D copy within one buffer was
    // checked for overlapping rows, row by row, before its bounds, so 2^40 interleaved rows
    // (even bytes into odd ones) took hours to be found out of bounds.
    let mut r = rec();
    let x = r.device_buffer::<u8>(64);
    let mut dag = Dag::new();
    let e = dag
        .add_memcpy_2d(Copy2d {
            dst: x.region(0..),
            dst_pitch: 2,
            src: x.region(1..),
            src_pitch: 2,
            width: 1,
            height: 1 << 40,
        })
        .unwrap_err();
    assert!(e.to_string().contains("outside its 64-byte buffer"), "{e}");
}

#[test]
fn copy_bounds_errors_name_the_node() {
    let mut r = rec();
    let a = r.device_buffer::<f32>(100);
    let b = r.device_buffer::<f32>(50);
    let mut dag = Dag::new();
    let e = dag.add_copy(dst(&a), src(&b)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node `memcpy#0`: copies 200 bytes into a 400-byte destination (sizes must match)"
    );
    let e = dag
        .add_copy(dst(a.region(60..110)), src(b.region(..)))
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("destination range, bytes 240..440, is outside its 400-byte buffer"),
        "{e}"
    );
    let e = dag
        .add_memcpy_2d(Copy2d {
            dst: a.region(..),
            dst_pitch: 10,
            src: b.region(..),
            src_pitch: 10,
            width: 10,
            height: 6,
        })
        .unwrap_err();
    assert!(e.to_string().contains("source range, bytes 0..240"), "{e}");
    let e = dag.add_memset(a.region(95..105), 0u32).unwrap_err();
    assert!(
        e.to_string()
            .contains("writes bytes 380..420 of a 400-byte buffer"),
        "{e}"
    );
    let h = r.host_buffer::<u8>(8);
    let e = dag.add_memset(&h, 0u8).unwrap_err();
    assert!(e.to_string().contains("device memory"), "{e}");
    let three = r.device_buffer::<u8>(3);
    let e = dag.add_memset(&three, 0u16).unwrap_err();
    assert!(
        e.to_string()
            .contains("not a whole number of 2-byte values"),
        "{e}"
    );
    assert_eq!(dag.node_count(), 0, "no invalid node was added");
}

#[test]
fn launch_shapes_are_validated_against_the_target() {
    let mut r = rec();
    let k = r.kernel("k", &[]);
    let mut dag = Dag::new();
    let n = dag.add_kernel(&k, LaunchConfig::new(1, 2048), &[]).unwrap();
    dag.set_name(n, "too wide");
    let e = dag.lower(&mut r).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("node `too wide`: kernel `k` launch grid (1,1,1) block (2048,1,1): block.x = 2048 exceeds"),
        "{e}"
    );
    assert!(
        r.calls().is_empty(),
        "nothing is lowered from an invalid DAG"
    );
    dag.set_launch_config(n, LaunchConfig::new((1, 70000), 32))
        .unwrap();
    let e = dag.lower(&mut r).unwrap_err();
    assert!(e.to_string().contains("grid.y = 70000"), "{e}");
}

#[test]
fn objects_of_another_target_are_rejected_at_validation() {
    let mut mine = rec();
    let mut other = rec();
    let k = other.kernel("k", &[]);
    let mut dag = Dag::new();
    dag.add_kernel(&k, LaunchConfig::new(1, 1), &[]).unwrap();
    let e = dag.lower(&mut mine).unwrap_err();
    assert!(
        e.to_string()
            .contains("kernel `k` belongs to recording backend"),
        "{e}"
    );

    let a = other.device_buffer::<u8>(4);
    let b = other.device_buffer::<u8>(4);
    let mut dag = Dag::new();
    dag.add_copy(dst(&a), src(&b)).unwrap();
    let e = dag.lower(&mut mine).unwrap_err();
    assert!(
        e.to_string().contains("the destination buffer belongs to"),
        "{e}"
    );
}

#[test]
fn editing_parameters_in_the_dag() {
    let mut r = rec();
    let x = r.device_buffer::<u32>(4);
    let k = r.kernel("k", &[8, 4]);
    let mut dag = Dag::new();
    let n = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x, 1u32])
        .unwrap();
    let m = dag.add_memset(&x, 5u32).unwrap();
    dag.set_kernel_args(n, &args![&x, 9u32]).unwrap();
    dag.set_memset_value(m, 6u32).unwrap();
    let e = dag.set_memset_value(m, 6u8).unwrap_err();
    assert!(e.to_string().contains("4-byte values"), "{e}");
    let e = dag.set_kernel_args(m, &args![&x, 1u32]).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node `memset#1`: is a memset node, not a kernel node"
    );
    let Op::Kernel(kn) = dag.node(n).unwrap().op() else {
        panic!()
    };
    assert_eq!(kn.arg_bytes(1), &9u32.to_ne_bytes());
}

#[test]
fn dot_snapshot() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(1024);
    let h = r.host_buffer::<f32>(1024);
    let k = r.kernel("scale", &[8, 4]);
    let mut dag = Dag::new();
    let up = dag.add_copy(dst(&x), src(&h)).unwrap();
    let a = dag
        .add_kernel(
            &k,
            LaunchConfig::new(4, 256).with_shared_mem(1024),
            &args![&x, 2.0f32],
        )
        .unwrap();
    let host = dag.add_host(|| {});
    let z = dag.add_memset(&x, 0u32).unwrap();
    dag.set_name(a, "scale \"x\"");
    dag.chain(&[z, up, a, host]).unwrap();
    let dot = dag.to_dot();
    let expect = r##"digraph cudagraph {
  rankdir=TB;
  node [fontname="Helvetica", fontsize=10, style=filled];
  n0 [label="memcpy#0\nmemcpy HostToDevice 4 KiB", shape=parallelogram, fillcolor="#d1e7dd", style="filled"];
  n1 [label="scale \"x\"\nkernel scale\ngrid (4,1,1) block (256,1,1)\nsmem 1 KiB", shape=box, fillcolor="#cfe2ff", style="filled"];
  n2 [label="host#2\nhost closure", shape=hexagon, fillcolor="#f8d7da", style="filled"];
  n3 [label="memset#3\nmemset 4 KiB of 0x0 (4-byte)", shape=parallelogram, fillcolor="#fff3cd", style="filled"];
  n3 -> n0;
  n0 -> n1;
  n1 -> n2;
}
"##;
    assert_eq!(dot, expect);
    assert_eq!(dot, dag.clone().to_dot(), "deterministic");
}

/// Renders the DOT with Graphviz when it is installed (CI installs it); without `dot` on the
/// PATH the test is a failure in CI (`CI=true`) and a skip with a message elsewhere.
#[test]
#[cfg_attr(miri, ignore = "spawns Graphviz `dot`: Miri cannot run a process")]
fn dot_renders_with_graphviz() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(16);
    let k = r.kernel("k\\weird\"name", &[8]);
    let mut dag = Dag::new();
    let mut prev = dag.add_memset(&x, 0u32).unwrap();
    for i in 0..5 {
        let n = dag
            .add_kernel(&k, LaunchConfig::new(1, 16), &args![&x])
            .unwrap();
        dag.set_name(n, format!("step {i}\n(second line)"));
        dag.add_dependency(prev, n).unwrap();
        prev = n;
    }
    let child = dag.clone();
    let c = dag.add_child(&child);
    dag.add_dependency(prev, c).unwrap();
    let dot = dag.to_dot();
    let Some((svg, _)) = graphviz_svg(&dot) else {
        return;
    };
    assert!(svg.contains("<svg"), "{svg}");
    assert!(svg.contains("step 4"), "labels reach the SVG");
    assert_eq!(svg.matches("class=\"node\"").count(), dag.node_count());
    assert_eq!(svg.matches("class=\"edge\"").count(), dag.edge_count());
}

#[test]
#[cfg_attr(
    miri,
    ignore = "10,000 nodes: hours under Miri; the smaller DAG tests cover the same code"
)]
fn ten_thousand_node_dag_builds_validates_and_lowers() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(1);
    let k = r.kernel("inc", &[8]);
    let mut dag = Dag::new();
    let mut prev = None;
    for _ in 0..10_000 {
        let n = dag
            .add_kernel(&k, LaunchConfig::new(1, 1), &args![&x])
            .unwrap();
        if let Some(p) = prev {
            dag.add_dependency(p, n).unwrap();
        }
        prev = Some(n);
    }
    let handles = dag.lower(&mut r).unwrap();
    assert_eq!(r.calls().len(), 10_000);
    assert_eq!(handles.iter().flatten().count(), 10_000);
    for (i, c) in r.calls().iter().enumerate() {
        let want: Vec<usize> = if i == 0 { vec![] } else { vec![i - 1] };
        assert_eq!(c.deps, want);
    }
    // A cycle through the whole chain is found and listed.
    let first = dag.node_ids().next().unwrap();
    let e = dag.add_dependency(prev.unwrap(), first).unwrap_err();
    match e {
        Error::Dag(DagError::Cycle { nodes }) => assert_eq!(nodes.len(), 10_001),
        other => panic!("{other:?}"),
    }
}

#[test]
fn host_closure_panics_are_caught_and_kept() {
    let h = HostFn::new(|| panic!("boom {}", 42));
    // SAFETY: `h` is a live HostFn.
    unsafe { host_trampoline(Arc::as_ptr(&h) as *mut _) };
    assert_eq!(h.take_panic().as_deref(), Some("boom 42"));
    assert_eq!(h.take_panic(), None, "reported once");
}

#[test]
fn captured_nodes_lower_as_one_capture_after_their_dependencies() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(64);
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let before = dag
        .add_kernel(&k, LaunchConfig::new(1, 64), &args![&x])
        .unwrap();
    // SAFETY: the work enqueues nothing (the recording backend never calls it anyway).
    let cap = unsafe { dag.add_captured("library call", [Region::from(&x)], |_| Ok(())) };
    dag.set_name(cap, "lib");
    dag.add_dependency(before, cap).unwrap();
    let after = dag.add_empty();
    dag.add_dependency(cap, after).unwrap();
    check(
        &dag,
        &mut r,
        "
0 cudaGraphAddKernelNode kernel `kernel#0` deps=[] kernel=k grid=(1,1,1) block=(64,1,1) smem=0 args=[0000000000700000]
1 cudaStreamBeginCaptureToGraph captured `lib` deps=[0] work=`library call` uses=[@0000+256]
2 cudaGraphAddNode empty `empty#2` deps=[1] ",
    );
    assert_eq!(dag.node(cap).unwrap().kind(), NodeKind::Captured);
    let dot = dag.to_dot();
    assert!(dot.contains("captured: library call"), "{dot}");
    assert!(dot.contains("uses 1 buffers, 256 B"), "{dot}");

    // Its buffers count as the node's: kept alive, checked against the target.
    let mut n = 0;
    dag.for_each_allocation(&mut |_| n += 1);
    assert_eq!(n, 2, "the kernel's and the captured node's reference to x");
    let mut other = rec();
    let y = other.device_buffer::<f32>(4);
    let mut dag = Dag::new();
    // SAFETY: as above.
    unsafe { dag.add_captured("elsewhere", [Region::from(&y)], |_| Ok(())) };
    let e = dag.lower(&mut r).unwrap_err();
    let e = e.to_string();
    assert!(e.contains("captured#0"), "{e}");
    assert!(e.contains("the captured work's buffer belongs to"), "{e}");
}

#[test]
fn default_names_are_kind_and_serial_and_are_not_stored() {
    for (kind, serial) in [
        ("kernel", 0u64),
        ("host", 9),
        ("memcpy", 10),
        ("kernel", 99),
        ("kernel", 1_000),
        ("empty", 1_000_001),
        ("memcpy", u64::MAX),
    ] {
        let n = super::NodeName {
            given: None,
            kind,
            serial,
        };
        let text = format!("{kind}#{serial}");
        assert_eq!(n.to_string(), text);
        let mut bytes = b"x".to_vec();
        n.write_to(&mut bytes);
        assert_eq!(bytes, format!("x{text}").as_bytes(), "written as bytes");
        assert_eq!(format!("{n:?}"), format!("{text:?}"));
        assert!(n == *text, "{text} compares equal");
        assert_eq!(n, text);
        assert!(text == n, "{text} compares equal");
        assert_eq!(
            format!("{n:>30}|"),
            format!("{text:>30}|"),
            "padded like a str"
        );
        // Only the canonical spelling is the name.
        for other in [
            format!("{kind}#0{serial}"),
            format!("{kind}#+{serial}"),
            format!("{kind}#{serial}0"),
            format!("{kind}#{serial} "),
            format!("{kind}{serial}"),
            format!("{kind}#"),
            format!("x{kind}#{serial}"),
        ] {
            assert!(n != other.as_str(), "{text} is not {other:?}");
        }
    }
    let mut dag = Dag::new();
    let e = dag.add_empty();
    assert_eq!(dag.node(e).unwrap().name(), "empty#0");
    assert!(dag.node(e).unwrap().given_name.is_none(), "no string kept");
    assert_eq!(dag.find("empty#0"), Some(e));
    assert_eq!(dag.find("empty#00"), None);
    dag.set_name(e, "join");
    assert_eq!(dag.node(e).unwrap().name(), "join");
    assert_eq!(dag.node(e).unwrap().name().given(), Some("join"));
    assert_eq!(dag.find("join"), Some(e));
    assert_eq!(dag.find("empty#0"), None);
}

#[test]
fn recording_puts_calls_into_words_on_request_and_again_after_more_calls() {
    let mut r = rec();
    let k = r.kernel("k", &[4, 8]);
    let mut dag = Dag::new();
    let a = dag
        .add_kernel(&k, LaunchConfig::new(2, 32), &args![1u32, 2u64])
        .unwrap();
    dag.lower(&mut r).unwrap();
    assert_eq!(r.call_count(), 1);
    assert_eq!(
        r.calls()[0].params,
        "kernel=k grid=(2,1,1) block=(32,1,1) smem=0 args=[01000000,0200000000000000]"
    );
    // A second lowering appends; the words are made again.
    dag.set_kernel_args(a, &args![3u32, 4u64]).unwrap();
    dag.lower(&mut r).unwrap();
    assert_eq!(r.calls().len(), 2);
    assert!(r.calls()[1]
        .params
        .contains("args=[03000000,0400000000000000]"));
    assert_eq!(r.calls()[1].name, "kernel#0");
    r.clear();
    assert_eq!(r.call_count(), 0);
    assert!(r.calls().is_empty());
    assert_eq!(r.transcript(), "");
}

#[test]
fn serial_order_is_the_canonical_order_when_it_applies() {
    // A small deterministic generator (no dependency): DAGs with forward edges only, with
    // backward edges, and with removed nodes whose slots are taken again.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    // The first cases only under Miri (each takes over a second there).
    for case in 0..if cfg!(miri) { 6 } else { 60 } {
        let mut dag = Dag::new();
        let ids: Vec<NodeId> = (0..24).map(|_| dag.add_empty()).collect();
        for _ in 0..40 {
            let (a, b) = (next(24) as usize, next(24) as usize);
            let (a, b) = if case % 3 == 0 || a < b {
                (a, b)
            } else {
                (b, a)
            };
            // Cycles are refused; the DAG stays acyclic either way.
            let _ = dag.add_dependency(ids[a], ids[b]);
        }
        if case % 4 == 1 {
            dag.remove(ids[next(24) as usize]).unwrap();
            let late = dag.add_empty();
            let _ = dag.add_dependency(ids[next(24) as usize], late);
        }
        let fast = dag.serial_order();
        if case % 3 != 0 && case % 4 != 1 {
            assert!(fast.is_some(), "case {case}: forward edges only");
        }
        if let Some(order) = fast {
            assert_eq!(order, dag.ready_order(), "case {case}");
        }
        assert_eq!(dag.topological_order(), dag.ready_order(), "case {case}");
        let plan = dag.lowering_plan(crate::device::DeviceKey::Cuda(0));
        assert_eq!(
            plan.order,
            dag.ready_order(),
            "case {case}: lowering's order"
        );
        assert!(!plan.has_ffts && plan.peer_pairs.is_empty());
    }
}

#[test]
fn wrong_kind_errors_read_as_english() {
    let mut dag = Dag::new();
    let e = dag.add_empty();
    let err = dag.set_memset_value(e, 1u8).unwrap_err().to_string();
    assert!(err.contains("is an empty node, not a memset node"), "{err}");
}

#[test]
fn a_dag_made_with_capacity_builds_without_growing_and_lowers_the_same() {
    let mut r = rec();
    let x = r.device_buffer::<f32>(256);
    let k = r.kernel("scale", &[8, 4]);
    let build = |mut dag: Dag| {
        let mut prev = None;
        for i in 0..100 {
            let id = dag
                .add_kernel(&k, LaunchConfig::new(1, 256), &args![&x, i as f32])
                .unwrap();
            if let Some(p) = prev {
                dag.add_dependency(p, id).unwrap();
            }
            prev = Some(id);
        }
        dag
    };
    let reserved = Dag::with_capacity(100, 99);
    let room = reserved.capacity();
    assert!(
        room.0 >= 100 && room.1 >= 99,
        "room for the nodes: {room:?}"
    );
    assert!(Dag::new().capacity().0 < 100, "a new DAG reserves nothing");
    let reserved = build(reserved);
    assert_eq!(reserved.capacity(), room, "filled without growing");
    assert_eq!((reserved.node_count(), reserved.edge_count()), (100, 99));
    r.clear();
    reserved.lower(&mut r).unwrap();
    let with_capacity = r.transcript();
    r.clear();
    build(Dag::new()).lower(&mut r).unwrap();
    assert_eq!(with_capacity, r.transcript());
}

#[test]
fn nodes_stay_small() {
    // Every node is as large as the largest kind kept inline; building a DAG moves and grows
    // arrays of them. Large kinds are boxed (memcpy, FFT, collective), and a default name is
    // not stored.
    let node = std::mem::size_of::<crate::dag::Node>();
    assert!(node <= 120, "a node is {node} bytes");
    assert!(std::mem::size_of::<crate::dag::Op>() <= 72);
}

/// `dot` rendered to SVG by Graphviz (asserting that it accepts the text), with what Graphviz
/// printed on stderr; `None` where Graphviz is not installed, which fails in CI (it installs it).
pub(super) fn graphviz_svg(dot: &str) -> Option<(String, String)> {
    use std::io::Write;
    let run = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match run {
        Ok(c) => c,
        Err(e) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "Graphviz `dot` is required in CI: {e}"
            );
            eprintln!("skipping the Graphviz render: `dot` not found ({e})");
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(dot.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "dot failed: {stderr}\n{dot}");
    Some((String::from_utf8(out.stdout).unwrap(), stderr))
}
