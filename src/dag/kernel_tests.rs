//! Host-only tests of kernel nodes: argument checks when added, launch priorities and shapes,
//! and the in-place argument updates an `Exec` makes (with a stand-in for CUDA's call).

use super::tests::rec;
use super::*;
use crate::args;
use crate::device::DeviceLimits;
use crate::LaunchConfig;

#[test]
fn kernel_priorities_are_lowered() {
    let mut r = rec();
    let k = r.kernel("k", &[]);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, LaunchConfig::new(1, 1), &[]).unwrap();
    let e = dag.add_empty();
    dag.set_priority(a, -2).unwrap();
    assert!(dag.set_priority(e, 1).is_err(), "only kernel nodes");
    dag.lower(&mut r).unwrap();
    assert!(
        r.calls()[0].params.ends_with("priority=-2"),
        "{:?}",
        r.calls()[0]
    );
}

#[test]
fn kernel_argument_errors_name_the_node_and_argument() {
    let mut r = rec();
    let k = r.kernel("saxpy", &[4, 8, 8]);
    let mut dag = Dag::new();
    dag.add_empty();
    let e = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![1.0f32])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "node `kernel#1`: kernel `saxpy` takes 3 arguments but 1 were given"
    );
    let e = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![1.0f32, 2u64, 3u32])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("argument 2 is 4 bytes (u32, 4 bytes) but parameter 2 is 8 bytes"),
        "{e}"
    );
    // A buffer of another backend is rejected as an argument.
    let mut other = rec();
    let foreign = other.device_buffer::<f32>(4);
    let e = dag
        .add_kernel(&k, LaunchConfig::new(1, 1), &args![1.0f32, &foreign, 3u64])
        .unwrap_err();
    assert!(e.to_string().contains("another device or backend"), "{e}");
    // Pinned host memory is not a kernel argument.
    let pinned = r.host_buffer::<f32>(4);
    let e = dag
        .add_kernel(
            &k,
            LaunchConfig::new(1, 1),
            &args![1.0f32, &pinned.region(..), 3u64],
        )
        .unwrap_err();
    assert!(e.to_string().contains("pinned host buffer"), "{e}");
    assert_eq!(dag.node_count(), 1, "nothing added");
}

#[test]
fn the_quick_argument_check_agrees_with_the_described_one() {
    let mut r = rec();
    let mut other = rec();
    let k = r.kernel("k", &[4, 8, 8]);
    let (x, foreign, pinned) = (
        r.device_buffer::<f32>(4),
        other.device_buffer::<f32>(4),
        r.host_buffer::<f32>(4),
    );
    let (xr, pr) = (x.region(..), pinned.region(..));
    let cases: Vec<Vec<crate::KernelArg>> = vec![
        args![1.0f32, &x, 3u64].to_vec(),
        args![1.0f32, &xr, &x].to_vec(),
        args![1.0f32, &x].to_vec(),
        args![1.0f32, &x, 3u64, 4u64].to_vec(),
        args![1.0f64, &x, 3u64].to_vec(),
        args![1.0f32, 2u32, 3u64].to_vec(),
        args![1.0f32, &foreign, 3u64].to_vec(),
        args![1.0f32, &pr, 3u64].to_vec(),
        vec![],
    ];
    for (i, a) in cases.iter().enumerate() {
        let problem = k.args_layout_problem(a);
        assert_eq!(
            k.args_fit_layout(a),
            problem.is_none(),
            "case {i}: {problem:?}"
        );
    }
}

#[test]
fn a_one_argument_update_points_cuda_at_the_value_and_keeps_it_only_when_accepted() {
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let k = rec.kernel("k", &[8, 4]);
    let (x, other) = (rec.device_buffer::<u32>(64), rec.device_buffer::<u32>(64));
    let mut dag = Dag::new();
    let id = dag
        .add_kernel(&k, LaunchConfig::new(1, 32), &crate::args![&x, 7u32])
        .unwrap();
    let crate::dag::Op::Kernel(node) = &mut dag.node_mut(id).unwrap().op else {
        panic!("not a kernel node")
    };
    let own = node.cuda_params().kernelParams;
    // SAFETY: the array has one pointer per parameter (two), each to a value of its size.
    let at = |p: *mut *mut std::ffi::c_void| unsafe { (*p.add(0), *p.add(1)) };
    let (own0, own1) = at(own);
    // CUDA is given the caller's value where it is.
    let new = crate::KernelArg::from(9u32);
    let mut seen = std::ptr::null_mut();
    let r = node.update_value_with(1, &new, |p| {
        seen = at(p.kernelParams).1;
        Err(Error::Invalid("refused".into()))
    });
    assert!(r.is_err());
    assert_eq!(
        seen,
        new.as_bytes().as_ptr() as *mut _,
        "CUDA read the value there"
    );
    assert_eq!(
        node.arg_bytes(1),
        &7u32.to_ne_bytes(),
        "a refusal keeps the old"
    );
    assert_eq!(
        at(own),
        (own0, own1),
        "the array points at the node's values again"
    );
    let done = node
        .update_value_with(1, &crate::KernelArg::from(11u32), |_| Ok(()))
        .unwrap();
    assert!(done);
    assert_eq!(node.arg_bytes(1), &11u32.to_ne_bytes());
    assert_eq!(at(own), (own0, own1));
    // A panic in the call points the array back and keeps the old value.
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        node.update_value_with(1, &crate::KernelArg::from(13u32), |_| panic!("in CUDA"))
    }));
    assert!(unwound.is_err());
    assert_eq!(node.arg_bytes(1), &11u32.to_ne_bytes());
    assert_eq!(at(own), (own0, own1));
    // An address in the buffer the parameter has is a value update too.
    let region = x.region(4..8);
    let done = node
        .update_value_with(0, &crate::KernelArg::from(&region), |_| Ok(()))
        .unwrap();
    assert!(done);
    assert_eq!(node.arg_bytes(0), &(x.alloc.ptr + 16).to_ne_bytes());
    // What does not fit in place (another buffer, a value of another size, a parameter the
    // kernel does not have) is left to the general path: CUDA is not called and nothing
    // changes.
    for (i, a) in [
        (0, crate::KernelArg::from(&other)),
        (1, crate::KernelArg::from(3u64)),
        (2, crate::KernelArg::from(3u32)),
    ] {
        let done = node
            .update_value_with(i, &a, |_| panic!("CUDA called for {i}"))
            .unwrap();
        assert!(!done);
    }
    assert_eq!(node.arg_bytes(0), &(x.alloc.ptr + 16).to_ne_bytes());
    assert_eq!(node.arg_bytes(1), &11u32.to_ne_bytes());
    assert!(Arc::ptr_eq(
        node.args.buffers()[0].as_ref().unwrap(),
        &x.alloc
    ));
}

#[test]
fn new_values_with_the_same_buffers_are_written_in_place_and_undone_when_cuda_refuses() {
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let k = rec.kernel("k", &[8, 4]);
    let (a, b) = (rec.device_buffer::<u32>(64), rec.device_buffer::<u32>(64));
    let mut dag = Dag::new();
    let id = dag
        .add_kernel(&k, LaunchConfig::new(1, 32), &args![&a, 7u32])
        .unwrap();
    let crate::dag::Op::Kernel(node) = &mut dag.node_mut(id).unwrap().op else {
        panic!("not a kernel node")
    };
    assert!(node.args.fits_in_place(&args![&a.region(4..8), 1u32]));
    assert!(!node.args.fits_in_place(&args![&b, 1u32]), "another buffer");
    assert!(
        !node.args.fits_in_place(&args![0u64, 1u32]),
        "a value for a buffer"
    );
    assert!(
        !node.args.fits_in_place(&args![&a, 1u64]),
        "a value of another size"
    );
    assert!(!node.args.fits_in_place(&args![&a]), "too few");
    let before = (node.arg_bytes(0).to_vec(), node.arg_bytes(1).to_vec());
    let seen = |p: &crate::sys::cudaKernelNodeParams| {
        // SAFETY: the array has one pointer per parameter, each to its value.
        unsafe {
            (
                *(*p.kernelParams).cast::<u64>(),
                *(*p.kernelParams.add(1)).cast::<u32>(),
            )
        }
    };
    let mut got = (0, 0);
    let moved = a.region(4..8);
    let r = node.update_values_with(&args![&moved, 9u32], |p| {
        got = seen(p);
        Err(Error::Invalid("refused".into()))
    });
    assert!(r.is_err());
    assert_eq!(got, (a.alloc.ptr + 16, 9), "CUDA saw the new values");
    let after = (node.arg_bytes(0).to_vec(), node.arg_bytes(1).to_vec());
    assert_eq!(after, before, "a refusal undoes them");
    let done = node
        .update_values_with(&args![&moved, 11u32], |_| Ok(()))
        .unwrap();
    assert!(done);
    assert_eq!(node.arg_bytes(0), &(a.alloc.ptr + 16).to_ne_bytes());
    assert_eq!(node.arg_bytes(1), &11u32.to_ne_bytes());
    // Another buffer, or a value of another size: left to the general path, untouched.
    for other in [args![&b, 12u32], args![&a, 12u64]] {
        let done = node
            .update_values_with(&other, |_| panic!("CUDA called"))
            .unwrap();
        assert!(!done);
    }
    assert_eq!(node.arg_bytes(0), &(a.alloc.ptr + 16).to_ne_bytes());
    assert_eq!(node.arg_bytes(1), &11u32.to_ne_bytes());
}

#[test]
fn a_launch_shape_is_checked_for_every_node_not_only_the_first_of_a_kernel() {
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let k = rec.kernel("k", &[4]);
    let good = LaunchConfig::new(1, 256);
    let mut dag = Dag::new();
    let a = dag.add_kernel(&k, good, &args![1u32]).unwrap();
    let b = dag.add_kernel(&k, good, &args![2u32]).unwrap();
    dag.add_dependency(a, b).unwrap();
    dag.lower(&mut rec).unwrap();
    // The same kernel again, with a block too large for the device: still refused.
    let bad = dag
        .add_kernel(&k, LaunchConfig::new(1, 2048), &args![3u32])
        .unwrap();
    dag.set_name(bad, "too wide");
    dag.add_dependency(b, bad).unwrap();
    let e = dag.lower(&mut rec).unwrap_err();
    assert!(
        matches!(&e, Error::LaunchShape { node: Some(node), .. } if node == "too wide"),
        "{e}"
    );
}
