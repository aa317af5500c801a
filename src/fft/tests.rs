//! Host-only tests: plan and node validation, and lowering through the recording backend.

use super::*;
use crate::{Dag, DeviceLimits, FftSpec, RecordingBackend};

fn c2c(n: i64, batch: i64) -> FftPlanDesc {
    FftPlanDesc::new(FftType::C2C, &[n], batch)
}

#[test]
fn plan_validation() {
    let bad = |d: FftPlanDesc, want: &str| {
        let e = FftPlan::new(d).unwrap_err().to_string();
        assert!(e.contains(want), "{e} (wanted {want})");
    };
    bad(FftPlanDesc::new(FftType::C2C, &[], 1), "rank 0");
    bad(FftPlanDesc::new(FftType::C2C, &[2, 2, 2, 2], 1), "rank 4");
    bad(FftPlanDesc::new(FftType::C2C, &[8, 0], 1), "size 0");
    bad(c2c(8, 0), "batch 0");
    bad(
        FftPlanDesc::new(FftType::Z2Z, &[8], 1).with_load(LoadCallback::ComplexI8),
        "single precision",
    );
    bad(
        c2c(8, 1).with_load(LoadCallback::RealI8),
        "does not fit a C2C plan",
    );
    bad(
        FftPlanDesc::new(FftType::C2R, &[8], 1).with_store(StoreCallback::Power),
        "does not fit a C2R plan",
    );
    bad(
        c2c(8, 1).with_layout(Layout {
            inembed: vec![8, 8],
            istride: 1,
            idist: 8,
            onembed: vec![8],
            ostride: 1,
            odist: 8,
        }),
        "need 1 entries",
    );
    bad(
        FftPlanDesc::new(FftType::C2C, &[4, 8], 1).with_layout(Layout {
            inembed: vec![4, 6],
            istride: 1,
            idist: 32,
            onembed: vec![4, 8],
            ostride: 1,
            odist: 32,
        }),
        "inembed[1] = 6 is smaller than the data's 8",
    );
}

#[test]
fn plan_sizes() {
    let p = FftPlan::new(FftPlanDesc::new(FftType::R2C, &[4, 10], 3)).unwrap();
    assert_eq!(p.input_bytes(), 4 * 10 * 3 * 4);
    assert_eq!(p.output_bytes(), 4 * 6 * 3 * 8);
    let p = FftPlan::new(
        c2c(256, 2)
            .with_load(LoadCallback::ComplexI8)
            .with_store(StoreCallback::Power),
    )
    .unwrap();
    assert_eq!(p.input_bytes(), 512 * 2);
    assert_eq!(p.output_bytes(), 512 * 4);
    // Strided: every other element, batches 600 apart.
    let p = FftPlan::new(c2c(256, 3).with_layout(Layout {
        inembed: vec![256],
        istride: 2,
        idist: 600,
        onembed: vec![256],
        ostride: 1,
        odist: 256,
    }))
    .unwrap();
    assert_eq!(p.input_bytes(), (2 * 600 + 2 * 255 + 1) * 8);
    assert_eq!(p.output_bytes(), 768 * 8);
}

#[test]
fn node_validation_names_the_node() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let plan = FftPlan::new(c2c(64, 4).with_store(StoreCallback::Scale)).unwrap();
    let small = r.device_buffer::<[f32; 2]>(64);
    let big = r.device_buffer::<[f32; 2]>(256);
    let host = r.host_buffer::<[f32; 2]>(256);
    let mut dag = Dag::new();
    let spec = |input: &crate::DeviceBuffer<[f32; 2]>, params: FftParams| FftSpec {
        plan: plan.clone(),
        direction: Direction::Forward,
        input: input.into(),
        output: (&big).into(),
        params,
    };
    let store = FftParams {
        load: None,
        store: Some(CallbackParams::store(1.0)),
    };
    let e = dag
        .add_fft(spec(&small, store.clone()))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "node `fft#0`: the input has 512 bytes but the plan (C2C [64] x4) needs 2048"
    );
    let e = dag
        .add_fft(spec(&big, FftParams::none()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("store callback needs store parameters"), "{e}");
    let e = dag
        .add_fft(spec(
            &big,
            FftParams {
                load: Some(CallbackParams::load(1.0)),
                store: Some(CallbackParams::store(1.0)),
            },
        ))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("has load callback parameters but the plan has no load callback"),
        "{e}"
    );
    let e = dag
        .add_fft(spec(
            &big,
            FftParams {
                load: None,
                store: Some(CallbackParams::load(1.0)),
            },
        ))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs CallbackParams::Store"), "{e}");
    let mut s = spec(&big, store.clone());
    s.input = (&host).into();
    assert!(dag
        .add_fft(s)
        .unwrap_err()
        .to_string()
        .contains("device memory"));
    let mut s = spec(&big, store.clone());
    s.direction = Direction::Inverse;
    s.plan = FftPlan::new(FftPlanDesc::new(FftType::R2C, &[64], 1)).unwrap();
    s.params = FftParams::none();
    assert!(dag
        .add_fft(s)
        .unwrap_err()
        .to_string()
        .contains("forward only"));
    // A store override region too small for the output.
    let e = dag
        .add_fft(spec(
            &big,
            FftParams {
                load: None,
                store: Some(CallbackParams::Store {
                    scale: 1.0,
                    output: Some(small.region(..)),
                    accumulate: false,
                }),
            },
        ))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("override region has 512 bytes; the plan needs 2048"),
        "{e}"
    );
    // Element types: complex float data in a buffer of plain floats is refused.
    let floats = r.device_buffer::<f32>(512);
    let mut s = spec(&big, store.clone());
    s.input = (&floats).into();
    let e = dag.add_fft(s).unwrap_err().to_string();
    assert!(
        e.contains("the input has 4-byte elements, but the plan (C2C, store Scale) reads 8-byte"),
        "{e}"
    );
    assert_eq!(dag.node_count(), 0);
    dag.add_fft(spec(&big, store)).unwrap();
}

/// One plan, a forward then an inverse node, and a parallel branch: each node gets its own
/// handle and parameter buffer; ordered nodes share a work slot, parallel ones do not.
#[test]
fn lowering_gives_each_node_its_own_handle_and_parameter_buffer() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let plan = FftPlan::new(c2c(256, 1).with_store(StoreCallback::Scale)).unwrap();
    let a = r.device_buffer::<[f32; 2]>(256);
    let b = r.device_buffer::<[f32; 2]>(256);
    let c = r.device_buffer::<[f32; 2]>(256);
    let d = r.device_buffer::<[f32; 2]>(256);
    let node = |dir,
                input: &crate::DeviceBuffer<[f32; 2]>,
                output: &crate::DeviceBuffer<[f32; 2]>,
                scale| FftSpec {
        plan: plan.clone(),
        direction: dir,
        input: input.into(),
        output: output.into(),
        params: FftParams {
            load: None,
            store: Some(CallbackParams::store(scale)),
        },
    };
    let mut dag = Dag::new();
    let fwd = dag.add_fft(node(Direction::Forward, &a, &b, 1.0)).unwrap();
    let inv = dag
        .add_fft(node(Direction::Inverse, &b, &a, 1.0 / 256.0))
        .unwrap();
    // The parallel branch touches neither `a` nor `b`, which the ordered pair writes.
    let side = dag.add_fft(node(Direction::Forward, &c, &d, 2.0)).unwrap();
    dag.add_dependency(fwd, inv).unwrap();
    dag.set_name(side, "parallel");
    dag.lower(&mut r).unwrap();
    let t = r.transcript().replace("0x70000000", "@");
    let expect = "\
0 cudaGraphAddNode kernel `fft#0` deps=[] kernel=cudagraph_fft_set_params handle=#1 param_buffer=@2000 bytes=16 params=0000803f000000000000000000000000
1 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#0` deps=[0] handle=#1 plan=C2C[256]x1 dir=Forward in=@0000 out=@0800 work_slot=0
2 cudaGraphAddNode kernel `fft#1` deps=[1] kernel=cudagraph_fft_set_params handle=#2 param_buffer=@2100 bytes=16 params=0000803b000000000000000000000000
3 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#1` deps=[2] handle=#2 plan=C2C[256]x1 dir=Inverse in=@0800 out=@0000 work_slot=0
4 cudaGraphAddNode kernel `parallel` deps=[] kernel=cudagraph_fft_set_params handle=#3 param_buffer=@2200 bytes=16 params=00000040000000000000000000000000
5 cudaStreamBeginCaptureToGraph+cufftExec captured `parallel` deps=[4] handle=#3 plan=C2C[256]x1 dir=Forward in=@1000 out=@1800 work_slot=1
";
    assert_eq!(t, expect, "{t}");
}

#[test]
fn params_update_in_the_dag_is_checked() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let plan = FftPlan::new(c2c(16, 1).with_load(LoadCallback::ComplexI8)).unwrap();
    let input = r.device_buffer::<[i8; 2]>(16);
    let out = r.device_buffer::<[f32; 2]>(16);
    let mut dag = Dag::new();
    let n = dag
        .add_fft(FftSpec {
            plan,
            direction: Direction::Forward,
            input: (&input).into(),
            output: (&out).into(),
            params: FftParams {
                load: Some(CallbackParams::load(0.5)),
                store: None,
            },
        })
        .unwrap();
    dag.set_fft_params(
        n,
        FftParams {
            load: Some(CallbackParams::load(2.0)),
            store: None,
        },
    )
    .unwrap();
    let e = dag.set_fft_params(n, FftParams::none()).unwrap_err();
    assert!(
        e.to_string()
            .contains("load callback needs load parameters"),
        "{e}"
    );
    let k = dag.add_empty();
    assert!(dag.set_fft_params(k, FftParams::none()).is_err());
    assert!(dag.to_dot().contains("load ComplexI8"));
}

#[test]
fn sizes_that_overflow_are_errors() {
    let huge = FftPlanDesc::new(FftType::C2C, &[1 << 40, 1 << 30], 1 << 20);
    let e = FftPlan::new(huge).unwrap_err().to_string();
    assert!(e.contains("more elements than fit in 64 bits"), "{e}");
    let bytes_overflow = FftPlanDesc::new(FftType::C2C, &[1 << 31], 1 << 30);
    assert!(FftPlan::new(bytes_overflow).is_err());
    let layout = FftPlanDesc::new(FftType::C2C, &[16], 4).with_layout(Layout {
        inembed: vec![16],
        istride: i64::MAX / 2,
        idist: 1,
        onembed: vec![16],
        ostride: 1,
        odist: 16,
    });
    assert!(FftPlan::new(layout).is_err());
}

#[test]
fn lowering_state_is_send() {
    fn send<T: Send>() {}
    send::<crate::dag::nodes::fft::LoweringContext>();
    send::<crate::Exec>();
}
