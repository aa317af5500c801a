//! Host-only tests: plan and node validation, and lowering through the recording backend.

use super::*;
use crate::{Dag, DeviceLimits, FftSpec, RecordingBackend};

fn c2c(n: i64, batch: i64) -> FftPlanDesc {
    FftPlanDesc::new(FftType::C2C, &[n], batch)
}

#[test]
fn plan_validation() {
    let bad = |d: FftPlanDesc, want: &str| {
        let e = FftPlan::new(d).unwrap_err();
        assert!(
            matches!(&e, Error::FftPlan { problem } if problem.contains(want)),
            "{e:?} (wanted {want})"
        );
        assert!(e.to_string().starts_with("FFT plan: "), "{e}");
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
    let e = FftPlan::new(huge).unwrap_err();
    assert!(
        matches!(&e, Error::FftPlan { problem } if problem.contains("more elements than fit in 64 bits")),
        "{e:?}"
    );
    let bytes_overflow = FftPlanDesc::new(FftType::C2C, &[1 << 31], 1 << 30);
    assert!(matches!(
        FftPlan::new(bytes_overflow),
        Err(Error::FftPlan { .. })
    ));
    let layout = FftPlanDesc::new(FftType::C2C, &[16], 4).with_layout(Layout {
        inembed: vec![16],
        istride: i64::MAX / 2,
        idist: 1,
        onembed: vec![16],
        ostride: 1,
        odist: 16,
    });
    assert!(matches!(FftPlan::new(layout), Err(Error::FftPlan { .. })));
}

/// cuFFT's LTO callbacks need the 32-bit plan call: a plan with callbacks whose sizes do not
/// fit is refused before cuFFT is asked (the same plan without callbacks takes the 64-bit
/// call).
#[test]
fn callbacks_need_32_bit_shapes() {
    use handle::{plan_shape, Shape};
    let big = || FftPlanDesc::new(FftType::C2C, &[1 << 31], 1);
    let plain = FftPlan::new(big()).unwrap();
    assert!(matches!(plan_shape(&plain), Ok(Shape::Wide(_))));
    let small = FftPlan::new(c2c(1 << 20, 4).with_store(StoreCallback::Scale)).unwrap();
    assert!(matches!(plan_shape(&small), Ok(Shape::Narrow(_))));
    for desc in [
        big().with_store(StoreCallback::Scale),
        big().with_load(LoadCallback::ComplexI8),
        c2c(16, 1 << 31).with_store(StoreCallback::Power),
    ] {
        let plan = FftPlan::new(desc).unwrap();
        let e = plan_shape(&plan).unwrap_err();
        assert!(
            matches!(&e, Error::FftPlan { problem } if problem.starts_with("cuFFT LTO callbacks need")),
            "{e:?}"
        );
    }
    let e = plan_shape(&FftPlan::new(big().with_store(StoreCallback::Scale)).unwrap()).unwrap_err();
    assert!(
        e.to_string().contains("[2147483648] x1, store Scale"),
        "{e}"
    );
}

/// The FFT lowering state (and so an `Exec`, which owns it) is `Send`: checked when this
/// module compiles, not when a test runs.
const _: () = {
    const fn send<T: Send>() {}
    send::<crate::dag::nodes::fft::FftCaptureState>();
    send::<crate::Exec>();
};

#[test]
fn unfused_needs_a_load_callback() {
    let e = FftPlan::new(c2c(8, 1).with_fusion(Fusion::Unfused)).unwrap_err();
    assert!(
        matches!(&e, Error::FftPlan { problem }
            if problem.contains("Fusion::Unfused needs a load callback") && problem.contains("has none")),
        "{e:?}"
    );
    let custom = LoadCallback::Custom(CustomCallback {
        source: String::new(),
        function: "my_load".into(),
        params_size: 4,
        elem_bytes: 8,
    });
    // Custom loads have both forms, as built-ins do; plans without a load only the fused one.
    let p = FftPlan::new(c2c(8, 1).with_load(custom.clone())).unwrap();
    assert!(p.has_unfused_form());
    assert_eq!(p.fusion(), Fusion::Auto);
    let u = FftPlan::new(
        c2c(8, 1)
            .with_load(custom.clone())
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    assert_eq!(u.fusion(), Fusion::Unfused);
    let inner = u.unfused_plan().unwrap();
    assert_eq!(inner.desc().load, None);
    assert_eq!(inner.input_bytes(), 8 * 8);
    // A double-precision custom load: the conversion writes double2.
    let z = FftPlan::new(
        FftPlanDesc::new(FftType::Z2Z, &[8], 1)
            .with_load(custom)
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    assert_eq!(z.unfused_plan().unwrap().input_bytes(), 8 * 16);
    assert!(!FftPlan::new(c2c(8, 1)).unwrap().has_unfused_form());
    for l in [
        LoadCallback::ComplexI8,
        LoadCallback::ComplexI16,
        LoadCallback::ComplexF32,
    ] {
        assert!(FftPlan::new(c2c(8, 1).with_load(l))
            .unwrap()
            .has_unfused_form());
    }
    let r = FftPlan::new(
        FftPlanDesc::new(FftType::R2C, &[8], 1)
            .with_load(LoadCallback::RealI8)
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    assert_eq!(r.fusion(), Fusion::Unfused);
    // The plan the unfused form runs after its conversion: no load, float input, same rest.
    let inner = r.unfused_plan().unwrap();
    assert_eq!(inner.desc().load, None);
    assert_eq!(inner.desc().fusion, Fusion::Fused);
    assert_eq!(inner.input_bytes(), 8 * 4);
    assert_eq!(r.input_bytes(), 8);
    assert_eq!(inner.output_bytes(), r.output_bytes());
}

#[test]
fn parameter_blobs_of_both_forms() {
    let p = FftPlan::new(
        c2c(16, 1)
            .with_load(LoadCallback::ComplexI8)
            .with_store(StoreCallback::Power),
    )
    .unwrap();
    let params = FftParams {
        load: Some(CallbackParams::load(0.5)),
        store: Some(CallbackParams::Store {
            scale: 2.0,
            output: None,
            accumulate: true,
        }),
    };
    let fused = p.setter_blob(FftForm::Fused, &params);
    let unfused = p.setter_blob(FftForm::Unfused, &params);
    assert_eq!(
        (
            p.setter_bytes(FftForm::Fused),
            p.setter_bytes(FftForm::Unfused)
        ),
        (32, 16)
    );
    // Fused: load part then store part; unfused: the store part alone, at 0.
    assert_eq!(&fused[16..32], &unfused[..16]);
    assert_eq!(&fused[..4], &0.5f32.to_ne_bytes());
    assert_eq!(&unfused[..4], &2.0f32.to_ne_bytes());
    assert_eq!(&unfused[4..8], &1u32.to_ne_bytes());
    assert!(unfused[16..].iter().all(|&b| b == 0));
    // The conversion kernel's parameters are the fused blob's load part.
    assert_eq!(FftPlan::load_param_bytes(&params), fused[..16]);
    assert_eq!(FftPlan::load_param_bytes(&FftParams::none()), [0; 16]);
}

/// Both forms through the recording backend: `Fusion::Auto` is fused there (not measured);
/// unfused, the node's conversion kernel node reads the input and writes the node's own scratch
/// buffer (with the load parameters as its argument), the parameter-setting node writes the
/// store part only (none without a store callback), and the transform reads the scratch buffer.
#[test]
fn lowering_both_forms() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let desc = c2c(256, 2)
        .with_load(LoadCallback::ComplexI8)
        .with_store(StoreCallback::Scale);
    let auto = FftPlan::new(desc.clone()).unwrap();
    let fused = FftPlan::new(desc.clone().with_fusion(Fusion::Fused)).unwrap();
    let unfused = FftPlan::new(desc.with_fusion(Fusion::Unfused)).unwrap();
    let real = FftPlan::new(
        FftPlanDesc::new(FftType::R2C, &[64], 1)
            .with_load(LoadCallback::RealI8)
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    let input = r.device_buffer::<[i8; 2]>(512);
    let out = r.device_buffer::<[f32; 2]>(512);
    let rin = r.device_buffer::<i8>(64);
    let rout = r.device_buffer::<[f32; 2]>(33);
    let params = |scale: f32| FftParams {
        load: Some(CallbackParams::load(0.5)),
        store: Some(CallbackParams::store(scale)),
    };
    let spec = |plan: &FftPlan, scale| FftSpec {
        plan: plan.clone(),
        direction: Direction::Forward,
        input: (&input).into(),
        output: (&out).into(),
        params: params(scale),
    };
    let mut dag = Dag::new();
    let a = dag.add_fft(spec(&auto, 1.0)).unwrap();
    let b = dag.add_fft(spec(&fused, 2.0)).unwrap();
    let c = dag.add_fft(spec(&unfused, 4.0)).unwrap();
    dag.add_fft(FftSpec {
        plan: real,
        direction: Direction::Forward,
        input: (&rin).into(),
        output: (&rout).into(),
        params: FftParams {
            load: Some(CallbackParams::load(0.25)),
            store: None,
        },
    })
    .unwrap();
    dag.add_dependency(a, b).unwrap();
    dag.add_dependency(b, c).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript().replace("0x70000000", "@");
    let expect = "\
0 cudaGraphAddNode kernel `fft#0` deps=[] kernel=cudagraph_fft_set_params handle=#1 param_buffer=@1700 bytes=32 params=0000003f0000000000000000000000000000803f000000000000000000000000
1 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#0` deps=[0] handle=#1 plan=C2C[256]x2 dir=Forward in=@0000 out=@0400 work_slot=0 form=fused (auto, not measured)
2 cudaGraphAddNode kernel `fft#1` deps=[1] kernel=cudagraph_fft_set_params handle=#2 param_buffer=@1800 bytes=32 params=0000003f00000000000000000000000000000040000000000000000000000000
3 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#1` deps=[2] handle=#2 plan=C2C[256]x2 dir=Forward in=@0000 out=@0400 work_slot=0 form=fused (requested)
4 cudaGraphAddNode kernel `fft#2` deps=[3] kernel=cudagraph_fft_convert_ci8 handle=#3 grid=(2,1,1) block=(256,1,1) in=@0000 scratch=@1900 elems=512 params=0000003f000000000000000000000000
5 cudaGraphAddNode kernel `fft#2` deps=[3] kernel=cudagraph_fft_set_params handle=#3 param_buffer=@2900 bytes=16 params=00008040000000000000000000000000
6 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#2` deps=[4, 5] handle=#3 plan=C2C[256]x2 dir=Forward in=@1900 out=@0400 work_slot=0 form=unfused: convert + FFT (requested)
7 cudaGraphAddNode kernel `fft#3` deps=[] kernel=cudagraph_fft_convert_ri8 handle=#4 grid=(1,1,1) block=(256,1,1) in=@1400 scratch=@2a00 elems=64 params=0000803e000000000000000000000000
8 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#3` deps=[7] handle=#4 plan=R2C[64]x1 dir=Forward in=@2a00 out=@1500 work_slot=1 form=unfused: convert + FFT (requested)
";
    assert_eq!(t, expect, "{t}");
    // The DAG's DOT shows what each plan asks for; the form chosen is in the Exec's.
    let dot = dag.to_dot();
    for line in [
        "fusion auto (decided when lowered)",
        "fused (requested)",
        "unfused: convert + FFT (requested)",
    ] {
        assert!(dot.contains(line), "{line}: {dot}");
    }
}

/// The DOT labels of FFT nodes: the form line exists only for plans with an unfused form, and
/// an `Exec`'s DOT (`to_dot_with` the lowering's decisions) shows the form chosen.
#[test]
fn dot_shows_the_form() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let input = r.device_buffer::<[i8; 2]>(64);
    let out = r.device_buffer::<[f32; 2]>(64);
    let mut dag = Dag::new();
    let auto = FftPlan::new(c2c(64, 1).with_load(LoadCallback::ComplexI8)).unwrap();
    let n = dag
        .add_fft(FftSpec {
            plan: auto,
            direction: Direction::Forward,
            input: (&input).into(),
            output: (&out).into(),
            params: FftParams {
                load: Some(CallbackParams::load(1.0)),
                store: None,
            },
        })
        .unwrap();
    dag.set_name(n, "channelise");
    let plain = FftPlan::new(c2c(64, 1)).unwrap();
    dag.add_fft(FftSpec {
        plan: plain,
        direction: Direction::Inverse,
        input: (&out).into(),
        output: (&out).into(),
        params: FftParams::none(),
    })
    .unwrap();
    let expect = |form: &str| {
        format!(
            "digraph cudagraph {{
  rankdir=TB;
  node [fontname=\"Helvetica\", fontsize=10, style=filled];
  n0 [label=\"channelise\\nfft C2C Forward [64] x1\\nload ComplexI8\\n{form}\", shape=component, fillcolor=\"#ffe5d0\", style=\"filled\"];
  n1 [label=\"fft#1\\nfft C2C Inverse [64] x1\", shape=component, fillcolor=\"#ffe5d0\", style=\"filled\"];
}}
"
        )
    };
    assert_eq!(dag.to_dot(), expect("fusion auto (decided when lowered)"));
    let measured = FusionDecision {
        form: FftForm::Unfused,
        source: FusionSource::Measured,
        timings: Some(FusionTimings {
            fused_us: 51.5,
            unfused_us: 37.0,
        }),
    };
    let uid = n.serial();
    let dot = dag.to_dot_with(&|u| (u == uid).then_some(measured));
    assert_eq!(
        dot,
        expect("unfused: convert + FFT (auto: 37.0 µs, fused 51.5 µs)")
    );
}

/// Unfused with an advanced layout: the conversion covers the whole input span (gaps
/// included), element `i` to scratch element `i`, and the callback-free plan keeps the layout,
/// so it reads at every offset what the load callback would have returned there.
#[test]
fn unfused_conversion_covers_the_input_span() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let layout = Layout {
        inembed: vec![256],
        istride: 2,
        idist: 600,
        onembed: vec![256],
        ostride: 1,
        odist: 256,
    };
    let plan = FftPlan::new(
        c2c(256, 3)
            .with_layout(layout.clone())
            .with_load(LoadCallback::ComplexI16)
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    let span = 2 * 600 + 2 * 255 + 1;
    assert_eq!(plan.input_bytes(), span * 4);
    let inner = plan.unfused_plan().unwrap();
    assert_eq!(inner.input_bytes(), span * 8);
    assert_eq!(inner.desc().layout.as_ref(), Some(&layout));
    let input = r.device_buffer::<[i16; 2]>(span);
    let out = r.device_buffer::<[f32; 2]>(768);
    let mut dag = Dag::new();
    dag.add_fft(FftSpec {
        plan,
        direction: Direction::Inverse,
        input: (&input).into(),
        output: (&out).into(),
        params: FftParams {
            load: Some(CallbackParams::load(1.0)),
            store: None,
        },
    })
    .unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript();
    assert!(
        t.contains("kernel=cudagraph_fft_convert_ci16")
            && t.contains(&format!("elems={span} "))
            && t.contains("grid=(7,1,1)"),
        "{t}"
    );
    assert_eq!(
        t.lines().count(),
        2,
        "no store callback: no parameter node\n{t}"
    );
}

fn custom_load(params_size: usize) -> LoadCallback {
    LoadCallback::Custom(CustomCallback {
        source: "__device__ float2 my_load(void* d, unsigned long long o, void* i, void* s) \
                 { return make_float2(0.f, 0.f); }"
            .into(),
        function: "my_load".into(),
        params_size,
        elem_bytes: 2,
    })
}

/// A custom load callback's conversion reads its parameters from the node's buffer: both forms
/// write the same (fused-layout) blob, load part then store part.
#[test]
fn custom_load_parameter_blobs_of_both_forms() {
    let p = FftPlan::new(
        c2c(16, 1)
            .with_load(custom_load(20))
            .with_store(StoreCallback::Power),
    )
    .unwrap();
    let params = FftParams {
        load: Some(CallbackParams::Custom((1..=20).collect())),
        store: Some(CallbackParams::store(2.0)),
    };
    for form in [FftForm::Fused, FftForm::Unfused] {
        assert_eq!(p.setter_bytes(form), 48, "{form:?}");
        assert_eq!(p.setter_store_offset(form), 32, "{form:?}");
        assert_eq!(
            p.setter_blob(form, &params),
            p.param_blob(&params),
            "{form:?}"
        );
    }
    let blob = p.setter_blob(FftForm::Unfused, &params);
    assert_eq!(&blob[..20], &(1..=20).collect::<Vec<u8>>()[..]);
    assert_eq!(&blob[32..36], &2.0f32.to_ne_bytes());
    // Built-in loads: unfused, the store part alone, at 0.
    let b = FftPlan::new(
        c2c(16, 1)
            .with_load(LoadCallback::ComplexI8)
            .with_store(StoreCallback::Power),
    )
    .unwrap();
    assert_eq!(b.setter_store_offset(FftForm::Unfused), 0);
    assert_eq!(b.setter_store_offset(FftForm::Fused), 16);
    // A custom load without parameters and no store: no buffer in either form.
    let none = FftPlan::new(c2c(16, 1).with_load(custom_load(0))).unwrap();
    assert_eq!(none.setter_bytes(FftForm::Fused), 0);
    assert_eq!(none.setter_bytes(FftForm::Unfused), 0);
}

/// The conversion kernel of a custom load: the user's source, then a kernel calling the
/// function with `callerInfo` = its `info` argument, writing the type the callback-free plan
/// reads.
#[test]
fn custom_conversion_source() {
    let cb = custom_load(4);
    let LoadCallback::Custom(c) = &cb else {
        unreachable!()
    };
    for (kind, out) in [
        (FftType::C2C, "float2"),
        (FftType::C2R, "float2"),
        (FftType::R2C, "float"),
        (FftType::Z2Z, "double2"),
        (FftType::D2Z, "double"),
    ] {
        let (name, src) = handle::convert_source(&cb, kind);
        assert_eq!(name, "cudagraph_fft_convert_custom");
        assert!(src.starts_with(&c.source), "{src}");
        assert!(
            src.contains(&format!(
                "extern \"C\" __global__ void cudagraph_fft_convert_custom({out}* out, void* dataIn, void* info, unsigned long long n)"
            )),
            "{src}"
        );
        assert!(
            src.contains("out[i] = my_load(dataIn, i, info, nullptr);"),
            "{src}"
        );
    }
}

/// A custom-load plan in both forms through the recording backend: unfused, the setter writes
/// the whole blob and runs first, the conversion (reading the buffer through `info`) after it,
/// the transform after the conversion; without parameters the conversion's `info` is null.
#[test]
fn lowering_custom_load_both_forms() {
    let mut r = RecordingBackend::new(DeviceLimits::hopper());
    let input = r.device_buffer::<[i8; 2]>(512);
    let out = r.device_buffer::<f32>(512);
    let out2 = r.device_buffer::<[f32; 2]>(512);
    let desc = c2c(256, 2)
        .with_load(custom_load(8))
        .with_store(StoreCallback::Power);
    let fused = FftPlan::new(desc.clone().with_fusion(Fusion::Fused)).unwrap();
    let unfused = FftPlan::new(desc.with_fusion(Fusion::Unfused)).unwrap();
    let bare = FftPlan::new(
        c2c(256, 2)
            .with_load(custom_load(0))
            .with_fusion(Fusion::Unfused),
    )
    .unwrap();
    let params = FftParams {
        load: Some(CallbackParams::Custom(vec![1, 2, 3, 4, 5, 6, 7, 8])),
        store: Some(CallbackParams::store(0.5)),
    };
    let spec = |plan: &FftPlan, params: FftParams| FftSpec {
        plan: plan.clone(),
        direction: Direction::Forward,
        input: (&input).into(),
        output: (&out).into(),
        params,
    };
    let mut dag = Dag::new();
    let a = dag.add_fft(spec(&fused, params.clone())).unwrap();
    let b = dag.add_fft(spec(&unfused, params)).unwrap();
    let c = dag
        .add_fft(FftSpec {
            plan: bare,
            direction: Direction::Forward,
            input: (&input).into(),
            output: (&out2).into(),
            params: FftParams {
                load: Some(CallbackParams::Custom(Vec::new())),
                store: None,
            },
        })
        .unwrap();
    dag.add_dependency(a, b).unwrap();
    dag.add_dependency(b, c).unwrap();
    dag.lower(&mut r).unwrap();
    let t = r.transcript().replace("0x70000000", "@");
    let expect = "\
0 cudaGraphAddNode kernel `fft#0` deps=[] kernel=cudagraph_fft_set_params handle=#1 param_buffer=@1c00 bytes=32 params=010203040506070800000000000000000000003f000000000000000000000000
1 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#0` deps=[0] handle=#1 plan=C2C[256]x2 dir=Forward in=@0000 out=@0400 work_slot=0 form=fused (requested)
2 cudaGraphAddNode kernel `fft#1` deps=[1] kernel=cudagraph_fft_set_params handle=#2 param_buffer=@1d00 bytes=32 params=010203040506070800000000000000000000003f000000000000000000000000
3 cudaGraphAddNode kernel `fft#1` deps=[2] kernel=cudagraph_fft_convert_custom handle=#2 grid=(2,1,1) block=(256,1,1) in=@0000 scratch=@1e00 elems=512 info=@1d00
4 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#1` deps=[3] handle=#2 plan=C2C[256]x2 dir=Forward in=@1e00 out=@0400 work_slot=0 form=unfused: convert + FFT (requested)
5 cudaGraphAddNode kernel `fft#2` deps=[4] kernel=cudagraph_fft_convert_custom handle=#3 grid=(2,1,1) block=(256,1,1) in=@0000 scratch=@2e00 elems=512 info=0x0
6 cudaStreamBeginCaptureToGraph+cufftExec captured `fft#2` deps=[5] handle=#3 plan=C2C[256]x2 dir=Forward in=@2e00 out=@0c00 work_slot=0 form=unfused: convert + FFT (requested)
";
    assert_eq!(t, expect, "{t}");
}
