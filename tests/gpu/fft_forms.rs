//! GPU tests of FFT nodes in their fused and unfused forms (issue 10), against rustfft as in
//! `fft.rs`. Tolerance: as there (`TOL` of the largest reference magnitude), in both forms: the
//! inputs are integers times a power-of-two scale, exact in f32, so the two forms differ only by
//! the transforms' rounding.

use anyhow::ensure;
use cudagraph::fft::{FftForm, Fusion, FusionSource};
use cudagraph::{
    args, CallbackParams, CustomCallback, Dag, DeviceBuffer, Direction, FftParams, FftPlan,
    FftPlanDesc, FftSpec, FftType, LaunchConfig, LoadCallback, StoreCallback, Stream, StreamFft,
};

use crate::common::Gpu;
use crate::fft::{
    check, check_real, ci8, ci8_64, ld_st, reference, signal, spec, to64, C32, C64, FORMS,
};

register!(gpu "fft::both_forms_integer_loads" => both_forms_integer_loads);
/// Every built-in integer load, in both forms, against rustfft: complex int8 (C2C forward, with
/// a store scale), complex int16 (C2C inverse), real int8 (R2C), complex int8 into a C2R, and a
/// strided complex int8 layout (stride 2, batch distance 300: the conversion covers the gaps).
fn both_forms_integer_loads(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 1024usize;
    let batch = 4usize;
    let m = n * batch;
    let scale = 0.25f32;
    let raw8 = ci8(m, 1);
    let raw16: Vec<[i16; 2]> = (0..m)
        .map(|i| [((i * 1237) % 30001) as i16 - 15000, (i % 4000) as i16 * 7])
        .collect();
    let real8: Vec<i8> = (0..m).map(|i| ((i * 53) % 251) as u8 as i8).collect();
    let h = n / 2 + 1;
    // C2R input: a half spectrum whose DC and Nyquist bins are real.
    let half8: Vec<[i8; 2]> = ci8(h * batch, 2)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            if i % h == 0 || i % h == n / 2 {
                [v[0], 0]
            } else {
                v
            }
        })
        .collect();
    let (stride, dist, sb) = (2usize, 300usize, 3usize);
    let strided = ci8(dist * sb, 3);
    let sn = 128usize;
    let (i8d, i16d, r8d, h8d, sd) = (
        DeviceBuffer::from_slice(d, &raw8)?,
        DeviceBuffer::from_slice(d, &raw16)?,
        DeviceBuffer::from_slice(d, &real8)?,
        // Room for complex floats: an out-of-place C2R may overwrite its input (cuFFT's docs),
        // and the fused form's input holds 2-byte elements; only the first `h * batch` are read.
        DeviceBuffer::from_slice(
            d,
            &half8
                .iter()
                .copied()
                .chain(std::iter::repeat_n([0i8; 2], 3 * h * batch))
                .collect::<Vec<_>>(),
        )?,
        DeviceBuffer::from_slice(d, &strided)?,
    );
    for (fusion, form) in FORMS {
        let plan = |desc: FftPlanDesc| FftPlan::new(desc.with_fusion(fusion));
        let c2c = FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64);
        let p8 = plan(
            c2c.clone()
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Scale),
        )?;
        let p16 = plan(c2c.with_load(LoadCallback::ComplexI16))?;
        let pr = plan(
            FftPlanDesc::new(FftType::R2C, &[n as i64], batch as i64)
                .with_load(LoadCallback::RealI8),
        )?;
        let pc2r = plan(
            FftPlanDesc::new(FftType::C2R, &[n as i64], batch as i64)
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Scale),
        )?;
        let ps = plan(
            FftPlanDesc::new(FftType::C2C, &[sn as i64], sb as i64)
                .with_load(LoadCallback::ComplexI8)
                .with_layout(cudagraph::Layout {
                    inembed: vec![sn as i64],
                    istride: stride as i64,
                    idist: dist as i64,
                    onembed: vec![sn as i64],
                    ostride: 1,
                    odist: sn as i64,
                }),
        )?;
        let o8 = DeviceBuffer::<C32>::zeros(d, m)?;
        let o16 = DeviceBuffer::<C32>::zeros(d, m)?;
        let or = DeviceBuffer::<C32>::zeros(d, h * batch)?;
        let oc2r = DeviceBuffer::<f32>::zeros(d, m)?;
        let os = DeviceBuffer::<C32>::zeros(d, sn * sb)?;
        let lp = || ld_st(Some(CallbackParams::load(scale)), None);
        let mut dag = Dag::new();
        let nodes = [
            dag.add_fft(spec(
                &p8,
                Direction::Forward,
                &i8d,
                &o8,
                ld_st(
                    Some(CallbackParams::load(scale)),
                    Some(CallbackParams::store(2.0)),
                ),
            ))?,
            dag.add_fft(spec(&p16, Direction::Inverse, &i16d, &o16, lp()))?,
            dag.add_fft(spec(&pr, Direction::Forward, &r8d, &or, lp()))?,
            dag.add_fft(FftSpec {
                plan: pc2r.clone(),
                direction: Direction::Inverse,
                input: h8d.region(..h * batch),
                output: (&oc2r).into(),
                params: ld_st(
                    Some(CallbackParams::load(scale)),
                    Some(CallbackParams::store(1.0 / n as f32)),
                ),
            })?,
            dag.add_fft(spec(&ps, Direction::Forward, &sd, &os, lp()))?,
        ];
        let mut exec = dag.instantiate(d)?;
        for node in nodes {
            let got = exec.fft_fusion(node)?;
            ensure!(
                got.form == form && got.source == FusionSource::Plan,
                "{fusion:?}: lowered as {got:?}"
            );
        }
        let dot = exec.to_dot();
        let line = match form {
            FftForm::Fused => "fused (requested)",
            FftForm::Unfused => "unfused: convert + FFT (requested)",
        };
        ensure!(dot.matches(line).count() == 5, "{dot}");
        gpu.launch_and_wait(&mut exec)?;
        let what = |s: &str| format!("{fusion:?}: {s}");
        let want8: Vec<C64> = reference(&ci8_64(&raw8, scale), n, false)
            .into_iter()
            .map(|c| c * 2.0)
            .collect();
        check(&o8.to_vec()?, &want8, &what("complex i8, store scale 2"))?;
        let x16: Vec<C64> = raw16
            .iter()
            .map(|v| C64::new(v[0] as f64, v[1] as f64) * scale as f64)
            .collect();
        check(
            &o16.to_vec()?,
            &reference(&x16, n, true),
            &what("complex i16, inverse"),
        )?;
        let xr: Vec<C64> = real8
            .iter()
            .map(|&v| C64::new(v as f64 * scale as f64, 0.0))
            .collect();
        let want_r: Vec<C64> = reference(&xr, n, false)
            .chunks(n)
            .flat_map(|c| c[..h].to_vec())
            .collect();
        check(&or.to_vec()?, &want_r, &what("real i8 (R2C)"))?;
        let full: Vec<C64> = ci8_64(&half8, scale)
            .chunks(h)
            .flat_map(|c| {
                (0..n)
                    .map(|k| if k < h { c[k] } else { c[n - k].conj() })
                    .collect::<Vec<_>>()
            })
            .collect();
        let want_c2r: Vec<f64> = reference(&full, n, true)
            .iter()
            .map(|c| c.re / n as f64)
            .collect();
        check_real(&oc2r.to_vec()?, &want_c2r, &what("complex i8 into C2R"))?;
        let gathered: Vec<[i8; 2]> = (0..sb)
            .flat_map(|b| (0..sn).map(move |i| b * dist + i * stride))
            .map(|at| strided[at])
            .collect();
        check(
            &os.to_vec()?,
            &reference(&ci8_64(&gathered, scale), sn, false),
            &what("strided complex i8"),
        )?;
    }
    Ok(())
}

register!(gpu "fft::both_forms_parameter_updates" => both_forms_updates);
/// Parameter updates in both forms: load scale and input override (the conversion kernel's
/// argument when unfused), store scale and output override (the parameter-setting node), each
/// alone and together, with launches queued between them; then a whole-graph update with new
/// buffers, and per-node updates after it (they must still reach the nodes of the graph the
/// Exec was instantiated from).
fn both_forms_updates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (512usize, 8usize);
    let m = n * batch;
    let (x1, x2) = (ci8(m, 4), ci8(m, 5));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    let f1 = reference(&ci8_64(&x1, 1.0), n, false);
    let f2 = reference(&ci8_64(&x2, 1.0), n, false);
    for (fusion, form) in FORMS {
        let plan = FftPlan::new(
            FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Scale)
                .with_fusion(fusion),
        )?;
        let launches = 6usize;
        let ring = DeviceBuffer::<C32>::zeros(d, m * launches)?;
        let out = DeviceBuffer::<C32>::zeros(d, m)?;
        let params = |load: f32, input: Option<&DeviceBuffer<[i8; 2]>>, store: f32, slot: usize| {
            ld_st(
                Some(CallbackParams::Load {
                    scale: load,
                    input: input.map(|i| i.region(..)),
                }),
                Some(CallbackParams::Store {
                    scale: store,
                    output: Some(ring.region(slot * m..(slot + 1) * m)),
                    accumulate: false,
                }),
            )
        };
        let build = |input: &DeviceBuffer<[i8; 2]>, output: &DeviceBuffer<C32>, k: f32| {
            let mut dag = Dag::new();
            let node = dag.add_fft(spec(
                &plan,
                Direction::Forward,
                input,
                output,
                ld_st(
                    Some(CallbackParams::load(k)),
                    Some(CallbackParams::store(1.0)),
                ),
            ))?;
            anyhow::Ok((dag, node))
        };
        let (dag, node) = build(&a, &out, 1.0)?;
        let mut exec = dag.instantiate(d)?;
        ensure!(exec.fft_fusion(node)?.form == form);
        // (load scale, load input override, store scale): alone and together, queued.
        type Step<'a> = (f32, Option<&'a DeviceBuffer<[i8; 2]>>, f32);
        let steps: [Step; 6] = [
            (1.0, None, 1.0),
            (0.5, None, 1.0),
            (0.5, None, 4.0),
            (0.5, Some(&b), 4.0),
            (2.0, Some(&b), 0.25),
            (2.0, None, 0.25),
        ];
        let spin = gpu.kernel("spin")?;
        spin.launch(&gpu.stream, LaunchConfig::new(1, 1), &args![50_000_000i64])?;
        for (i, &(l, input, st)) in steps.iter().enumerate() {
            exec.set_fft_params(node, params(l, input, st, i))?;
            exec.launch(&gpu.stream)?;
        }
        exec.synchronize()?;
        let got = ring.to_vec()?;
        for (i, &(l, input, st)) in steps.iter().enumerate() {
            let f = if input.is_some() { &f2 } else { &f1 };
            check(
                &got[i * m..(i + 1) * m],
                &times(f, (l * st) as f64),
                &format!(
                    "{fusion:?}: update {i} (load {l}, override {}, store {st})",
                    input.is_some()
                ),
            )?;
        }
        // A whole-graph update (new input, output and load scale 3), a per-node update after
        // it, and a refused one.
        let out2 = DeviceBuffer::<C32>::zeros(d, m)?;
        let (dag2, node2) = build(&b, &out2, 3.0)?;
        ensure!(node2 == node);
        after_whole_graph_update(
            gpu,
            &mut exec,
            &dag2,
            (node, form),
            (&out2, &f2),
            ld_st(
                Some(CallbackParams::load(-1.0)),
                Some(CallbackParams::store(0.5)),
            ),
            FftParams::none(),
            &format!("{fusion:?}"),
        )?;
    }
    Ok(())
}

/// `f` scaled by `k`.
fn times(f: &[C64], k: f64) -> Vec<C64> {
    f.iter().map(|c| c * k).collect()
}

/// The update sequence both forms go through after their queued per-node updates: `exec`
/// updated to `dag2` (whose FFT node writes `out` with a load scale of 3) keeps its plan and
/// form and gives `want × 3`; then per-node parameters `next` (scale −1, store 0.5) give
/// `want × −0.5`; then `refused` parameters are refused and change nothing.
#[allow(clippy::too_many_arguments)] // reason: one test sequence, spelled out at each use
fn after_whole_graph_update(
    gpu: &Gpu,
    exec: &mut cudagraph::Exec,
    dag2: &Dag,
    (node, form): (cudagraph::NodeId, FftForm),
    (out, want): (&DeviceBuffer<C32>, &[C64]),
    next: FftParams,
    refused: FftParams,
    what: &str,
) -> anyhow::Result<()> {
    let made = cudagraph::fft::plans_made();
    exec.update(dag2)?;
    ensure!(cudagraph::fft::plans_made() == made, "{what}: plans remade");
    ensure!(exec.fft_fusion(node)?.form == form);
    gpu.launch_and_wait(exec)?;
    check(
        &out.to_vec()?,
        &times(want, 3.0),
        &format!("{what}: after the whole-graph update"),
    )?;
    exec.set_fft_params(node, next)?;
    gpu.launch_and_wait(exec)?;
    check(
        &out.to_vec()?,
        &times(want, -0.5),
        &format!("{what}: per-node update after it"),
    )?;
    ensure!(exec.set_fft_params(node, refused).is_err());
    gpu.launch_and_wait(exec)?;
    check(
        &out.to_vec()?,
        &times(want, -0.5),
        &format!("{what}: after a refused update"),
    )
}

register!(gpu "fft::both_forms_stream_fft" => both_forms_stream_fft);
/// `StreamFft` in both forms, per-call parameters (load scale, input override, store scale).
fn both_forms_stream_fft(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (256usize, 16usize);
    let m = n * batch;
    let (x1, x2) = (ci8(m, 6), ci8(m, 7));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    for (fusion, form) in FORMS {
        let plan = FftPlan::new(
            FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Scale)
                .with_fusion(fusion),
        )?;
        let mut fft = StreamFft::new(d, &plan)?;
        ensure!(fft.fusion().form == form, "{:?}", fft.fusion());
        let outs: Vec<_> = (0..4)
            .map(|_| DeviceBuffer::<C32>::zeros(d, m))
            .collect::<Result<_, _>>()?;
        for (i, out) in outs.iter().enumerate() {
            let p = ld_st(
                Some(CallbackParams::Load {
                    scale: 0.5 * (i + 1) as f32,
                    input: (i % 2 == 1).then(|| b.region(..)),
                }),
                Some(CallbackParams::store(i as f32 + 1.0)),
            );
            fft.exec(
                &gpu.stream,
                Direction::Forward,
                &a.region(..),
                &out.region(..),
                &p,
            )?;
        }
        gpu.stream.synchronize()?;
        for (i, out) in outs.iter().enumerate() {
            let x = if i % 2 == 1 { &x2 } else { &x1 };
            let k = 0.5 * (i + 1) as f64 * (i as f64 + 1.0);
            let want: Vec<C64> = reference(&ci8_64(x, 1.0), n, false)
                .into_iter()
                .map(|c| c * k)
                .collect();
            check(
                &out.to_vec()?,
                &want,
                &format!("{fusion:?}: stream call {i}"),
            )?;
        }
    }
    Ok(())
}

/// Custom int8 load callbacks (a gain and an input override address, read through
/// `callerInfo`; all-zero parameters read zeros times zero): complex (C2C), real (R2C) and
/// complex into double precision (Z2Z).
pub(crate) const CUSTOM_I8: &str = r#"
struct i8_params { float gain; unsigned pad; unsigned long long ptr; };
__device__ float2 i8_load_c(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const i8_params* p = (const i8_params*)info;
    const char2* in = (const char2*)(p->ptr ? p->ptr : (unsigned long long)dataIn);
    char2 v = in[offset];
    return make_float2(v.x * p->gain, v.y * p->gain);
}
__device__ float i8_load_r(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const i8_params* p = (const i8_params*)info;
    const signed char* in = (const signed char*)(p->ptr ? p->ptr : (unsigned long long)dataIn);
    return in[offset] * p->gain;
}
__device__ double2 i8_load_z(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const i8_params* p = (const i8_params*)info;
    const char2* in = (const char2*)(p->ptr ? p->ptr : (unsigned long long)dataIn);
    char2 v = in[offset];
    return make_double2((double)v.x * p->gain, (double)v.y * p->gain);
}"#;

#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
struct I8Params {
    gain: f32,
    pad: u32,
    ptr: u64,
}

fn custom_i8(function: &str, elem_bytes: usize) -> LoadCallback {
    LoadCallback::Custom(CustomCallback {
        source: CUSTOM_I8.into(),
        function: function.into(),
        params_size: std::mem::size_of::<I8Params>(),
        elem_bytes,
    })
}

fn i8_params(gain: f32, input: Option<u64>) -> CallbackParams {
    CallbackParams::custom(I8Params {
        gain,
        pad: 0,
        ptr: input.unwrap_or(0),
    })
}

register!(gpu "fft::both_forms_custom_loads" => both_forms_custom_loads);
/// Custom int8 loads in both forms against rustfft: complex (C2C forward, with a built-in store
/// scale: unfused, the store part sits after the custom load part of the parameter buffer),
/// real (R2C), and complex into a double-precision Z2Z (the conversion writes double2).
fn both_forms_custom_loads(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (1024usize, 4usize);
    let m = n * batch;
    let h = n / 2 + 1;
    let gain = 0.25f32;
    let raw8 = ci8(m, 8);
    let real8: Vec<i8> = (0..m).map(|i| ((i * 29) % 253) as u8 as i8).collect();
    let (i8d, r8d) = (
        DeviceBuffer::from_slice(d, &raw8)?,
        DeviceBuffer::from_slice(d, &real8)?,
    );
    for (fusion, form) in FORMS {
        let plan = |desc: FftPlanDesc| FftPlan::new(desc.with_fusion(fusion));
        let pc = plan(
            FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
                .with_load(custom_i8("i8_load_c", 2))
                .with_store(StoreCallback::Scale),
        )?;
        let pr = plan(
            FftPlanDesc::new(FftType::R2C, &[n as i64], batch as i64)
                .with_load(custom_i8("i8_load_r", 1)),
        )?;
        let pz = plan(
            FftPlanDesc::new(FftType::Z2Z, &[n as i64], batch as i64)
                .with_load(custom_i8("i8_load_z", 2)),
        )?;
        ensure!(pc.has_unfused_form() && pr.has_unfused_form() && pz.has_unfused_form());
        let oc = DeviceBuffer::<C32>::zeros(d, m)?;
        let or = DeviceBuffer::<C32>::zeros(d, h * batch)?;
        let oz = DeviceBuffer::<C64>::zeros(d, m)?;
        let lp = || ld_st(Some(i8_params(gain, None)), None);
        let mut dag = Dag::new();
        let nodes = [
            dag.add_fft(spec(
                &pc,
                Direction::Forward,
                &i8d,
                &oc,
                ld_st(
                    Some(i8_params(gain, None)),
                    Some(CallbackParams::store(2.0)),
                ),
            ))?,
            dag.add_fft(spec(&pr, Direction::Forward, &r8d, &or, lp()))?,
            dag.add_fft(spec(&pz, Direction::Forward, &i8d, &oz, lp()))?,
        ];
        let mut exec = dag.instantiate(d)?;
        for node in nodes {
            let got = exec.fft_fusion(node)?;
            ensure!(
                got.form == form && got.source == FusionSource::Plan,
                "{fusion:?}: lowered as {got:?}"
            );
        }
        let dot = exec.to_dot();
        let line = match form {
            FftForm::Fused => "fused (requested)",
            FftForm::Unfused => "unfused: convert + FFT (requested)",
        };
        ensure!(dot.matches(line).count() == 3, "{dot}");
        ensure!(dot.contains("load i8_load_c"), "{dot}");
        gpu.launch_and_wait(&mut exec)?;
        let what = |s: &str| format!("{fusion:?}: {s}");
        let wantc: Vec<C64> = reference(&ci8_64(&raw8, gain), n, false)
            .into_iter()
            .map(|c| c * 2.0)
            .collect();
        check(
            &oc.to_vec()?,
            &wantc,
            &what("custom complex i8, store scale 2"),
        )?;
        let xr: Vec<C64> = real8
            .iter()
            .map(|&v| C64::new(v as f64 * gain as f64, 0.0))
            .collect();
        let want_r: Vec<C64> = reference(&xr, n, false)
            .chunks(n)
            .flat_map(|c| c[..h].to_vec())
            .collect();
        check(&or.to_vec()?, &want_r, &what("custom real i8 (R2C)"))?;
        let wantz = reference(&ci8_64(&raw8, gain), n, false);
        let gotz = oz.to_vec()?;
        let err = gotz
            .iter()
            .zip(&wantz)
            .map(|(g, w)| (g - w).norm())
            .fold(0.0, f64::max);
        let scale = wantz.iter().map(|c| c.norm()).fold(0.0, f64::max);
        ensure!(
            err <= 1e-12 * scale,
            "{}: error {err:e} vs {scale:e}",
            what("custom complex i8 into Z2Z")
        );
    }
    Ok(())
}

register!(gpu "fft::both_forms_custom_load_updates" => both_forms_custom_load_updates);
/// Parameter updates of a custom load in both forms (the custom parameters stay in the
/// parameter buffer: unfused, the conversion reads them there after the setter): gain, input
/// override and store scale, queued behind a slow kernel; a whole-graph update keeping the
/// plan; a per-node update after it; a refused update; and a `StreamFft` with per-call
/// parameters.
fn both_forms_custom_load_updates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (512usize, 8usize);
    let m = n * batch;
    let (x1, x2) = (ci8(m, 9), ci8(m, 10));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    let f1 = reference(&ci8_64(&x1, 1.0), n, false);
    let f2 = reference(&ci8_64(&x2, 1.0), n, false);
    // Every launch given `b`'s raw address runs on `gpu.stream`; this guard (dropped before
    // `b`, also on an early error return) waits for them.
    struct SyncOnDrop<'a>(&'a Stream);
    impl Drop for SyncOnDrop<'_> {
        fn drop(&mut self) {
            let _ = self.0.synchronize();
        }
    }
    let _sync = SyncOnDrop(&gpu.stream);
    // SAFETY: `b` outlives every launch given its address (the guard above waits for them
    // before `b` is dropped), and nothing writes it from the host meanwhile.
    let b_addr = unsafe { b.as_raw_ptr() };
    for (fusion, form) in FORMS {
        let plan = FftPlan::new(
            FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
                .with_load(custom_i8("i8_load_c", 2))
                .with_store(StoreCallback::Scale)
                .with_fusion(fusion),
        )?;
        let launches = 5usize;
        let ring = DeviceBuffer::<C32>::zeros(d, m * launches)?;
        let out = DeviceBuffer::<C32>::zeros(d, m)?;
        let params = |gain: f32, over: bool, store: f32, slot: usize| {
            ld_st(
                Some(i8_params(gain, over.then_some(b_addr))),
                Some(CallbackParams::Store {
                    scale: store,
                    output: Some(ring.region(slot * m..(slot + 1) * m)),
                    accumulate: false,
                }),
            )
        };
        let build = |input: &DeviceBuffer<[i8; 2]>, output: &DeviceBuffer<C32>, k: f32| {
            let mut dag = Dag::new();
            let node = dag.add_fft(spec(
                &plan,
                Direction::Forward,
                input,
                output,
                ld_st(Some(i8_params(k, None)), Some(CallbackParams::store(1.0))),
            ))?;
            anyhow::Ok((dag, node))
        };
        let (dag, node) = build(&a, &out, 1.0)?;
        let mut exec = dag.instantiate(d)?;
        ensure!(exec.fft_fusion(node)?.form == form);
        // (gain, input override, store scale): alone and together, queued.
        let steps = [
            (1.0f32, false, 1.0f32),
            (0.5, false, 1.0),
            (0.5, false, 4.0),
            (0.5, true, 4.0),
            (-2.0, true, 0.25),
        ];
        let spin = gpu.kernel("spin")?;
        spin.launch(&gpu.stream, LaunchConfig::new(1, 1), &args![50_000_000i64])?;
        for (i, &(g, over, st)) in steps.iter().enumerate() {
            exec.set_fft_params(node, params(g, over, st, i))?;
            exec.launch(&gpu.stream)?;
        }
        exec.synchronize()?;
        let got = ring.to_vec()?;
        for (i, &(g, over, st)) in steps.iter().enumerate() {
            check(
                &got[i * m..(i + 1) * m],
                &times(if over { &f2 } else { &f1 }, (g * st) as f64),
                &format!("{fusion:?}: custom update {i} (gain {g}, override {over}, store {st})"),
            )?;
        }
        // A whole-graph update (new input, output and gain 3), a per-node update after it,
        // and a refused one (wrong size).
        let out2 = DeviceBuffer::<C32>::zeros(d, m)?;
        let (dag2, node2) = build(&b, &out2, 3.0)?;
        ensure!(node2 == node);
        after_whole_graph_update(
            gpu,
            &mut exec,
            &dag2,
            (node, form),
            (&out2, &f2),
            ld_st(
                Some(i8_params(-1.0, None)),
                Some(CallbackParams::store(0.5)),
            ),
            ld_st(
                Some(CallbackParams::custom(1.0f32)),
                Some(CallbackParams::store(1.0)),
            ),
            &format!("{fusion:?}: custom"),
        )?;
        // StreamFft, per-call parameters.
        let mut fft = StreamFft::new(d, &plan)?;
        ensure!(fft.fusion().form == form, "{:?}", fft.fusion());
        let outs: Vec<_> = (0..4)
            .map(|_| DeviceBuffer::<C32>::zeros(d, m))
            .collect::<Result<_, _>>()?;
        for (i, o) in outs.iter().enumerate() {
            let p = ld_st(
                Some(i8_params(
                    0.5 * (i + 1) as f32,
                    (i % 2 == 1).then_some(b_addr),
                )),
                Some(CallbackParams::store(i as f32 + 1.0)),
            );
            fft.exec(
                &gpu.stream,
                Direction::Forward,
                &a.region(..),
                &o.region(..),
                &p,
            )?;
        }
        gpu.stream.synchronize()?;
        for (i, o) in outs.iter().enumerate() {
            let f = if i % 2 == 1 { &f2 } else { &f1 };
            let k = 0.5 * (i + 1) as f64 * (i as f64 + 1.0);
            check(
                &o.to_vec()?,
                &times(f, k),
                &format!("{fusion:?}: custom, stream call {i}"),
            )?;
        }
    }
    Ok(())
}

register!(gpu "fft::auto_fusion_is_decided_once" => auto_decided_once);
/// `Fusion::Auto`: decided once per shape and remembered (a second and third lowering, and a
/// `StreamFft` of the same plan, do not measure again, and all use the same form); the decision
/// is stored on disk (after forgetting this process's decisions it is read back, unless the
/// cache is off); the result is right in whichever form was chosen. Timings are not asserted.
fn auto_decided_once(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (4096usize, 256usize);
    let m = n * batch;
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
            .with_load(LoadCallback::ComplexI8),
    )?;
    ensure!(plan.fusion() == Fusion::Auto && plan.has_unfused_form());
    let forced = std::env::var(cudagraph::fft::FUSION_ENV)
        .is_ok_and(|v| !v.trim().is_empty() && !v.trim().eq_ignore_ascii_case("auto"));
    cudagraph::fft::forget_fusion_decisions();
    let m0 = cudagraph::fft::fusion_measurements();
    let first = cudagraph::fft::decide_fusion(d, &plan)?;
    let m1 = cudagraph::fft::fusion_measurements();
    println!(
        "auto decision for C2C {n} x {batch}, complex int8 load: {}",
        first.describe()
    );
    if forced {
        ensure!(first.source == FusionSource::Env && m1 == m0, "{first:?}");
    } else {
        ensure!(
            matches!(
                first.source,
                FusionSource::Measured | FusionSource::DiskCache
            ),
            "{first:?}"
        );
        ensure!(
            m1 - m0 == (first.source == FusionSource::Measured) as u64,
            "{} measurements for {first:?}",
            m1 - m0
        );
        let t = first
            .timings
            .expect("an automatic decision has its timings");
        ensure!(t.fused_us > 0.0 && t.unfused_us > 0.0, "{t:?}");
    }
    let x = ci8(m, 8);
    let input = DeviceBuffer::from_slice(d, &x)?;
    let outs = [
        DeviceBuffer::<C32>::zeros(d, m)?,
        DeviceBuffer::<C32>::zeros(d, m)?,
        DeviceBuffer::<C32>::zeros(d, m)?,
    ];
    let scale = 1.0 / 128.0;
    let lp = || ld_st(Some(CallbackParams::load(scale)), None);
    let mut dag = Dag::new();
    let a = dag.add_fft(spec(&plan, Direction::Forward, &input, &outs[0], lp()))?;
    dag.add_fft(spec(&plan, Direction::Forward, &input, &outs[1], lp()))?;
    let mut exec = dag.instantiate(d)?;
    let mut again = dag.instantiate(d)?;
    let mut stream_fft = StreamFft::new(d, &plan)?;
    ensure!(
        cudagraph::fft::fusion_measurements() == m1,
        "lowering a decided shape measured again"
    );
    for got in [
        exec.fft_fusion(a)?,
        again.fft_fusion(a)?,
        stream_fft.fusion(),
    ] {
        ensure!(got.form == first.form, "{got:?} vs {first:?}");
        if !forced {
            ensure!(got.source == FusionSource::Remembered, "{got:?}");
        }
    }
    let form_line = match first.form {
        FftForm::Fused => "fused (",
        FftForm::Unfused => "unfused: convert + FFT (",
    };
    ensure!(exec.to_dot().contains(form_line), "{}", exec.to_dot());
    ensure!(dag.to_dot().contains("fusion auto (decided when lowered)"));
    exec.launch(&gpu.stream)?;
    again.launch(&gpu.stream)?;
    stream_fft.exec(
        &gpu.stream,
        Direction::Forward,
        &input.region(..),
        &outs[2].region(..),
        &lp(),
    )?;
    exec.synchronize()?;
    again.synchronize()?;
    gpu.stream.synchronize()?;
    let want = reference(&ci8_64(&x, scale), n, false);
    for (i, o) in outs.iter().enumerate() {
        check(
            &o.to_vec()?,
            &want,
            &format!("auto ({:?}), output {i}", first.form),
        )?;
    }
    if !forced {
        // Read back from disk (no measurement) unless the cache is off or not writable.
        cudagraph::fft::forget_fusion_decisions();
        let m2 = cudagraph::fft::fusion_measurements();
        let back = cudagraph::fft::decide_fusion(d, &plan)?;
        println!("after forgetting: {back:?}");
        match back.source {
            FusionSource::DiskCache => {
                ensure!(cudagraph::fft::fusion_measurements() == m2);
                ensure!(back.form == first.form && back.timings == first.timings);
            }
            FusionSource::Measured => {
                let off =
                    std::env::var("CUDAGRAPH_CACHE_DIR").is_ok_and(|v| v == "off" || v.is_empty());
                println!("the decision was measured again (cache off: {off})");
            }
            other => anyhow::bail!("unexpected source {other:?}"),
        }
    }
    // An explicit measurement always measures (and changes no decision).
    let m3 = cudagraph::fft::fusion_measurements();
    let t = cudagraph::fft::measure_fusion(d, &plan)?;
    ensure!(cudagraph::fft::fusion_measurements() == m3 + 1);
    ensure!(t.fused_us.is_finite() && t.unfused_us.is_finite(), "{t:?}");
    println!("measured again: {t:?}");
    let plain = FftPlan::new(FftPlanDesc::new(FftType::C2C, &[n as i64], 1))?;
    ensure!(cudagraph::fft::measure_fusion(d, &plain).is_err());
    Ok(())
}

register!(gpu "fft::failed_or_panicking_update_keeps_the_plans" => failed_update_keeps_plans);
/// A whole-graph update whose lowering fails (a captured node's work returns an error) or
/// panics after the FFT node was lowered with its reused cuFFT state leaves the executable
/// graph working: the state goes back to the `Exec` instead of being destroyed while the graph
/// still uses it (checked against rustfft after each refusal; run under compute-sanitizer too).
fn failed_update_keeps_plans(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 2048usize;
    let x = signal(n, 5);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let y = DeviceBuffer::<C32>::zeros(d, n)?;
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_store(StoreCallback::Scale),
    )?;
    // 0 = works, 1 = fails, 2 = panics.
    let build = |how: u8| -> anyhow::Result<Dag> {
        let mut dag = Dag::new();
        let f = dag.add_fft(spec(
            &plan,
            Direction::Forward,
            &xd,
            &y,
            ld_st(None, Some(CallbackParams::store(1.0))),
        ))?;
        // SAFETY: the work enqueues nothing.
        let c = unsafe {
            dag.add_captured("after the FFT", [], move |_| match how {
                0 => Ok(()),
                1 => Err(cudagraph::Error::Invalid("refused on purpose".into())),
                _ => panic!("panics on purpose"),
            })
        };
        dag.add_dependency(f, c)?;
        Ok(dag)
    };
    let mut exec = build(0)?.instantiate(d)?;
    let want = reference(&to64(&x), n, false);
    let check_once = |exec: &mut cudagraph::Exec, what: &str| -> anyhow::Result<()> {
        y.memset_bytes(0)?;
        exec.launch(&gpu.stream)?;
        exec.synchronize()?;
        check(&y.to_vec()?, &want, what)
    };
    check_once(&mut exec, "before any update")?;
    let e = exec.update(&build(1)?).unwrap_err();
    ensure!(e.to_string().contains("refused on purpose"), "{e}");
    check_once(&mut exec, "after a failed update")?;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let dag = build(2).expect("built");
        let _ = exec.update(&dag);
    }));
    ensure!(panicked.is_err(), "the update panicked");
    check_once(&mut exec, "after a panicking update")?;
    exec.update(&build(0)?)?;
    check_once(&mut exec, "after a good update")
}
