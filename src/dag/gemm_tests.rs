//! Host tests of GEMM nodes (cuBLAS through the captured path): lowering through the
//! recording backend, the builder's checks naming the node, DOT, inferred dependencies, and
//! the typed error when cuBLAS is missing.

use super::*;
use crate::blas::{Gemm, Transpose};
use crate::device::DeviceLimits;
use crate::{args, In, LaunchConfig, Out};
use num_complex::Complex32;

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

/// The problem of a `DagError::Gemm` naming `node`.
fn gemm_problem(e: &Error, node: &str) -> String {
    match e {
        Error::Dag(DagError::Gemm { node: n, problem }) if n == node => problem.clone(),
        other => panic!("expected a GEMM error naming {node}, got {other:?}"),
    }
}

#[test]
fn a_gemm_lowers_as_a_captured_node_named_after_the_product() {
    let mut r = rec();
    let blas = r.blas();
    let (a, b, c) = (
        r.device_buffer::<f32>(6 * 4),
        r.device_buffer::<f32>(4 * 5),
        r.device_buffer::<f32>(6 * 5),
    );
    let k = r.kernel("fill", &[8]);
    let mut dag = Dag::new();
    let before = dag
        .add_kernel(&k, LaunchConfig::new(1, 64), &args![&a])
        .unwrap();
    let g = Gemm::new(6, 5, 4)
        .alpha(2.0)
        .beta(0.5)
        .workspace_bytes(1 << 20);
    let gemm = dag.add_gemm(&blas, &g, &a, &b, &c).unwrap();
    let after = dag
        .add_kernel(&k, LaunchConfig::new(1, 64), &args![&c])
        .unwrap();
    dag.chain(&[before, gemm, after]).unwrap();
    assert_eq!(dag.node(gemm).unwrap().name(), "gemm#1");
    assert_eq!(dag.node(gemm).unwrap().kind(), NodeKind::Captured);
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(
        lines[1].starts_with(
            "1 cudaStreamBeginCaptureToGraph captured `gemm#1` deps=[0] work=`Sgemm NN m=6 \
             n=5 k=4 lda=6 ldb=4 ldc=6 alpha=2.0 beta=0.5 workspace=1 MiB` uses=["
        ),
        "{t}"
    );
    // The uses are the three matrices (the elements they span) and the workspace, whose
    // made-up address is the placeholder handle's.
    assert!(lines[1].contains("+96,"), "{t}");
    assert!(lines[1].contains("+80,"), "{t}");
    assert!(lines[1].contains("+120,0xb1a500000000+1048576]"), "{t}");
    assert!(lines[2].contains("`kernel#2` deps=[1]"), "{t}");
    let dot = dag.to_dot();
    assert!(dot.contains("captured: Sgemm NN m=6 n=5 k=4"), "{dot}");
    assert!(dot.contains("gemm#1"), "{dot}");
}

#[test]
fn transposes_leading_dimensions_and_types_reach_the_recorded_call() {
    let mut r = rec();
    let blas = r.blas();
    // op(A) = Aᵀ is 3 x 2: A is stored 2 x 3 with ld 4; op(B) = Bᴴ is 2 x 5: B stored 5 x 2.
    let a = r.device_buffer::<Complex32>(4 * 2 + 2);
    let b = r.device_buffer::<Complex32>(5 * 2);
    let c = r.device_buffer::<Complex32>(3 * 5);
    let g = Gemm::new(3, 5, 2)
        .trans_a(Transpose::Yes)
        .trans_b(Transpose::Conjugate)
        .lda(4);
    let mut dag = Dag::new();
    dag.add_gemm(&blas, &g, &a, &b, &c).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    assert!(
        t.contains("work=`Cgemm TC m=3 n=5 k=2 lda=4 ldb=5 ldc=3"),
        "{t}"
    );
    // A spans ld * (cols - 1) + rows = 4 * 2 + 2 = 10 complex elements.
    assert!(t.contains("+80,"), "{t}");
}

#[test]
fn every_bad_shape_is_refused_naming_the_node() {
    let mut r = rec();
    let blas = r.blas();
    let a = r.device_buffer::<f64>(4 * 3);
    let b = r.device_buffer::<f64>(3 * 2);
    let c = r.device_buffer::<f64>(4 * 2);
    let mut dag = Dag::new();
    dag.add_empty();
    let ok = Gemm::<f64>::new(4, 2, 3);
    dag.add_gemm(&blas, &ok, &a, &b, &c).unwrap();
    let cases: Vec<(Gemm<f64>, &str)> = vec![
        (Gemm::new(0, 2, 3), "every size must be at least 1"),
        (Gemm::new(4, 2, 0), "every size must be at least 1"),
        (
            Gemm::new(1 << 31, 2, 3),
            "m = 2147483648 is more than cuBLAS takes",
        ),
        (
            ok.lda(3),
            "A's leading dimension 3 is less than its stored row count 4",
        ),
        (
            ok.ldc(5),
            "C is stored as 4 x 2 with leading dimension 5, which spans 9 elements, but its \
             buffer has 8",
        ),
        // Transposed, A is stored 3 x 4: ld 3 fits, the span (12) too; B transposed is
        // stored 2 x 3 with ld 2 (6 elements).
        (
            ok.trans_a(Transpose::Yes).lda(2),
            "A's leading dimension 2 is less than its stored row count 3",
        ),
        (
            Gemm::new(4, 3, 3),
            "B is stored as 3 x 3 with leading dimension 3, which spans 9 elements, but its \
             buffer has 6",
        ),
        (
            ok.workspace_bytes(0),
            "the workspace must be at least 1 byte",
        ),
    ];
    for (g, expected) in cases {
        let e = dag.add_gemm(&blas, &g, &a, &b, &c).unwrap_err();
        let problem = gemm_problem(&e, &format!("gemm#{}", dag.next_serial));
        assert!(problem.contains(expected), "{g:?}: {problem}");
    }
    // Transposes that fit are accepted.
    dag.add_gemm(
        &blas,
        &ok.trans_a(Transpose::Yes).lda(3).trans_b(Transpose::Yes),
        &a,
        &r.device_buffer::<f64>(2 * 3),
        &c,
    )
    .unwrap();
}

#[test]
fn c_may_not_be_an_input_and_buffers_must_be_on_the_handles_device() {
    let mut r = RecordingBackend::with_devices(DeviceLimits::hopper(), 2);
    let blas = r.blas();
    let a = r.device_buffer::<f32>(16);
    let b = r.device_buffer::<f32>(16);
    let g = Gemm::<f32>::new(4, 4, 4);
    let mut dag = Dag::new();
    let e = dag.add_gemm(&blas, &g, &a, &b, &a).unwrap_err();
    assert!(gemm_problem(&e, "gemm#0").contains("C overlaps A"), "{e}");
    let e = dag.add_gemm(&blas, &g, &a, &b, &b).unwrap_err();
    assert!(gemm_problem(&e, "gemm#0").contains("C overlaps B"), "{e}");
    // The same memory through another handle (a view; one memory wrapped twice is alike).
    let e = dag
        .add_gemm(&blas, &g, &a, &b, &b.view_as::<f32>())
        .unwrap_err();
    assert!(gemm_problem(&e, "gemm#0").contains("C overlaps B"), "{e}");
    // A may be B (C = A·A).
    let c = r.device_buffer::<f32>(16);
    dag.add_gemm(&blas, &g, &a, &a, &c).unwrap();
    let far = r.device_buffer_on::<f32>(1, 16);
    let e = dag.add_gemm(&blas, &g, &a, &far, &c).unwrap_err();
    let problem = gemm_problem(&e, "gemm#1");
    assert!(
        problem.contains("B belongs to") && problem.contains("but the cuBLAS handle to"),
        "{problem}"
    );
    // Another backend's handle.
    let other = rec().blas();
    let e = dag.add_gemm(&other, &g, &a, &b, &c).unwrap_err();
    assert!(gemm_problem(&e, "gemm#1").contains("A belongs to"), "{e}");
}

#[test]
fn a_gemm_reads_and_writes_its_matrices_for_inferred_dependencies() {
    let mut r = rec();
    let blas = r.blas();
    let (a, b, c) = (
        r.device_buffer::<f32>(16),
        r.device_buffer::<f32>(16),
        r.device_buffer::<f32>(16),
    );
    let k = r.kernel("k", &[8]);
    let mut dag = Dag::new();
    let fill = dag
        .add_kernel(&k, LaunchConfig::new(1, 16), &args![Out(&b)])
        .unwrap();
    let gemm = dag
        .add_gemm(&blas, &Gemm::new(4, 4, 4), &a, &b, &c)
        .unwrap();
    let read = dag
        .add_kernel(&k, LaunchConfig::new(1, 16), &args![In(&c)])
        .unwrap();
    assert_eq!(dag.races().len(), 2, "{:?}", dag.races());
    dag.infer_dependencies();
    assert!(dag.races().is_empty());
    let edges: Vec<(NodeId, NodeId)> = dag.edges().collect();
    assert!(edges.contains(&(fill, gemm)), "{edges:?}");
    assert!(edges.contains(&(gemm, read)), "{edges:?}");
}

#[test]
fn a_placeholder_handle_is_never_passed_to_cublas() {
    let mut r = rec();
    let e = r.blas().version().unwrap_err();
    assert!(matches!(e, Error::Placeholder { .. }), "{e:?}");
}

#[test]
fn without_cublas_loading_it_is_a_typed_error_naming_the_library() {
    // This host has no GPU; the error must say that the library is missing, not that there
    // is no device (loading comes before any device call, in `Blas::new` too).
    match crate::load::cublas() {
        Ok(_) => eprintln!("cuBLAS is installed on this machine: nothing to check"),
        Err(e) => {
            assert!(
                matches!(
                    &e,
                    Error::LibraryNotFound {
                        library: crate::Library::Cublas | crate::Library::CublasLt,
                        ..
                    }
                ),
                "{e:?}"
            );
            let text = e.to_string();
            assert!(text.contains(".so.13"), "{text}");
            assert!(text.contains("nvidia-cublas"), "{text}");
        }
    }
}
