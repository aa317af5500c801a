//! GPU tests of FFT nodes, all against rustfft (computed in f64). Tolerance: the largest
//! absolute error may be at most `TOL` times the largest magnitude of the reference.

use anyhow::ensure;
use cudagraph::fft::{FftForm, Fusion};
use cudagraph::{
    args, CallbackParams, CustomCallback, Dag, DeviceBuffer, Direction, FftParams, FftPlan,
    FftPlanDesc, FftSpec, FftType, LaunchConfig, LoadCallback, StoreCallback, Stream, StreamFft,
};
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

use crate::common::Gpu;

pub(crate) const TOL: f64 = 2e-5;

pub(crate) type C32 = Complex<f32>;
pub(crate) type C64 = Complex<f64>;

/// Batched 1D transforms of `x` (each `n` long), in f64.
pub(crate) fn reference(x: &[C64], n: usize, inverse: bool) -> Vec<C64> {
    let mut p = FftPlanner::<f64>::new();
    let f = if inverse {
        p.plan_fft_inverse(n)
    } else {
        p.plan_fft_forward(n)
    };
    let mut out = x.to_vec();
    for chunk in out.chunks_mut(n) {
        f.process(chunk);
    }
    out
}

pub(crate) fn to64(x: &[C32]) -> Vec<C64> {
    x.iter()
        .map(|c| C64::new(c.re as f64, c.im as f64))
        .collect()
}

pub(crate) fn check(got: &[C32], want: &[C64], what: &str) -> anyhow::Result<()> {
    ensure!(
        got.len() == want.len(),
        "{what}: {} vs {} elements",
        got.len(),
        want.len()
    );
    let scale = want.iter().map(|c| c.norm()).fold(1e-30, f64::max);
    let err = got
        .iter()
        .zip(want)
        .map(|(g, w)| (C64::new(g.re as f64, g.im as f64) - w).norm())
        .fold(0.0, f64::max);
    ensure!(
        err <= TOL * scale,
        "{what}: max error {err:e} > {TOL:e} x {scale:e}"
    );
    Ok(())
}

pub(crate) fn check_real(got: &[f32], want: &[f64], what: &str) -> anyhow::Result<()> {
    ensure!(got.len() == want.len(), "{what}: lengths");
    let scale = want.iter().map(|v| v.abs()).fold(1e-30, f64::max);
    let err = got
        .iter()
        .zip(want)
        .map(|(g, w)| (*g as f64 - w).abs())
        .fold(0.0, f64::max);
    ensure!(
        err <= TOL * scale,
        "{what}: max error {err:e} > {TOL:e} x {scale:e}"
    );
    Ok(())
}

pub(crate) fn signal(len: usize, seed: u32) -> Vec<C32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let a = (s % 2000) as f32 / 1000.0 - 1.0;
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            C32::new(a, (s % 2000) as f32 / 1000.0 - 1.0)
        })
        .collect()
}

pub(crate) fn spec(
    plan: &FftPlan,
    dir: Direction,
    i: &DeviceBuffer<impl cudagraph::DeviceRepr>,
    o: &DeviceBuffer<impl cudagraph::DeviceRepr>,
    params: FftParams,
) -> FftSpec {
    FftSpec {
        plan: plan.clone(),
        direction: dir,
        input: i.into(),
        output: o.into(),
        params,
    }
}

pub(crate) fn ld_st(load: Option<CallbackParams>, store: Option<CallbackParams>) -> FftParams {
    FftParams { load, store }
}

register!(gpu "fft::forward_then_inverse_1000_launches" => forward_inverse_ring);
/// The original scenario: one plan, a forward node then an inverse node with different
/// callback parameters, launched 1,000 times with no synchronisation in the loop; each launch
/// updates the scales and the output slot of a ring; every launch's result is checked.
fn forward_inverse_ring(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch, launches) = (256usize, 2usize, 1000usize);
    let m = n * batch;
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
            .with_load(LoadCallback::ComplexF32)
            .with_store(StoreCallback::Scale),
    )?;
    let x = signal(m, 1);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let spectrum = DeviceBuffer::<C32>::zeros(d, m)?;
    let ring = DeviceBuffer::<C32>::zeros(d, m * launches)?;
    let mut dag = Dag::new();
    let fwd = dag.add_fft(spec(
        &plan,
        Direction::Forward,
        &xd,
        &spectrum,
        ld_st(
            Some(CallbackParams::load(1.0)),
            Some(CallbackParams::store(1.0)),
        ),
    ))?;
    let inv = dag.add_fft(spec(
        &plan,
        Direction::Inverse,
        &spectrum,
        &ring,
        ld_st(
            Some(CallbackParams::load(1.0)),
            Some(CallbackParams::store(1.0 / n as f32)),
        ),
    ))?;
    dag.add_dependency(fwd, inv)?;
    let mut exec = dag.instantiate(d)?;
    let a = |i: usize| 0.5 + (i % 7) as f32 * 0.25;
    let b = |i: usize| 1.0 + (i % 5) as f32;
    let start = std::time::Instant::now();
    for i in 0..launches {
        exec.set_fft_params(
            fwd,
            ld_st(
                Some(CallbackParams::load(a(i))),
                Some(CallbackParams::store(b(i))),
            ),
        )?;
        exec.set_fft_params(
            inv,
            ld_st(
                Some(CallbackParams::load(1.0)),
                Some(CallbackParams::Store {
                    scale: 1.0 / n as f32,
                    output: Some(ring.region(i * m..(i + 1) * m)),
                    accumulate: false,
                }),
            ),
        )?;
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    println!(
        "1000 forward+inverse launches with updates: {:?}",
        start.elapsed()
    );
    let got = ring.to_vec()?;
    let roundtrip: Vec<C64> = reference(&reference(&to64(&x), n, false), n, true)
        .into_iter()
        .map(|c| c / n as f64)
        .collect();
    for i in 0..launches {
        let k = (a(i) * b(i)) as f64;
        let want: Vec<C64> = roundtrip.iter().map(|c| c * k).collect();
        check(&got[i * m..(i + 1) * m], &want, &format!("launch {i}"))?;
    }
    // The intermediate spectrum is the last launch's forward transform.
    let k = (a(launches - 1) * b(launches - 1)) as f64;
    let want: Vec<C64> = reference(&to64(&x), n, false)
        .into_iter()
        .map(|c| c * k)
        .collect();
    check(&spectrum.to_vec()?, &want, "spectrum")
}

register!(gpu "fft::parallel_nodes_of_one_plan" => parallel_nodes);
fn parallel_nodes(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (512usize, 8usize);
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64).with_store(StoreCallback::Scale),
    )?;
    let (x1, x2) = (signal(n * batch, 2), signal(n * batch, 3));
    let (a, b) = (
        DeviceBuffer::from_slice(d, &x1)?,
        DeviceBuffer::from_slice(d, &x2)?,
    );
    let (ya, yb) = (
        DeviceBuffer::<C32>::zeros(d, n * batch)?,
        DeviceBuffer::<C32>::zeros(d, n * batch)?,
    );
    let mut dag = Dag::new();
    dag.add_fft(spec(
        &plan,
        Direction::Forward,
        &a,
        &ya,
        ld_st(None, Some(CallbackParams::store(1.0))),
    ))?;
    dag.add_fft(spec(
        &plan,
        Direction::Inverse,
        &b,
        &yb,
        ld_st(None, Some(CallbackParams::store(2.0))),
    ))?;
    ensure!(dag.edge_count() == 0);
    let mut exec = dag.instantiate(d)?;
    for _ in 0..200 {
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    check(&ya.to_vec()?, &reference(&to64(&x1), n, false), "branch a")?;
    let want: Vec<C64> = reference(&to64(&x2), n, true)
        .into_iter()
        .map(|c| c * 2.0)
        .collect();
    check(&yb.to_vec()?, &want, "branch b")?;
    // Two Execs of the same DAG do not share parameter buffers either. They run at the same
    // time on two streams, with different scales and outputs: were the parameter buffer (or
    // the cuFFT handle's caller info) shared, one exec's setter kernel would overwrite the
    // other's parameters while its transform runs, and an output would get the other's scale
    // or stay unwritten.
    let mut other = dag.instantiate(d)?;
    let ids: Vec<_> = dag.node_ids().collect();
    let yc = DeviceBuffer::<C32>::zeros(d, n * batch)?;
    other.set_fft_params(
        ids[0],
        ld_st(
            None,
            Some(CallbackParams::Store {
                scale: 3.0,
                output: Some((&yc).into()),
                accumulate: false,
            }),
        ),
    )?;
    let s2 = cudagraph::Stream::new(d)?;
    for _ in 0..100 {
        exec.launch(&gpu.stream)?;
        other.launch(&s2)?;
    }
    exec.synchronize()?;
    other.synchronize()?;
    check(
        &ya.to_vec()?,
        &reference(&to64(&x1), n, false),
        "first exec kept scale 1 and its output",
    )?;
    let want3: Vec<C64> = reference(&to64(&x1), n, false)
        .into_iter()
        .map(|c| c * 3.0)
        .collect();
    check(
        &yc.to_vec()?,
        &want3,
        "second exec: scale 3 into its override output",
    )
}

register!(gpu "fft::load_callbacks_from_integers" => integer_loads);
fn integer_loads(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 1024usize;
    let raw: Vec<[i8; 2]> = (0..n)
        .map(|i| [((i * 37) % 255) as i8, ((i * 11) % 201) as i8])
        .collect();
    let raw16: Vec<[i16; 2]> = (0..n)
        .map(|i| [((i * 1237) % 30001) as i16 - 15000, (i as i16) * 7])
        .collect();
    let real8: Vec<i8> = (0..n).map(|i| ((i * 53) % 251) as i8).collect();
    let scale = 0.25f32;
    let out_c = DeviceBuffer::<C32>::zeros(d, n)?;
    let out_c2 = DeviceBuffer::<C32>::zeros(d, n)?;
    let out_r = DeviceBuffer::<C32>::zeros(d, n / 2 + 1)?;
    let i8d = DeviceBuffer::from_slice(d, &raw)?;
    let i16d = DeviceBuffer::from_slice(d, &raw16)?;
    let r8d = DeviceBuffer::from_slice(d, &real8)?;
    let p8 = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_load(LoadCallback::ComplexI8),
    )?;
    let p16 = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_load(LoadCallback::ComplexI16),
    )?;
    let pr = FftPlan::new(
        FftPlanDesc::new(FftType::R2C, &[n as i64], 1).with_load(LoadCallback::RealI8),
    )?;
    let mut dag = Dag::new();
    let lp = || ld_st(Some(CallbackParams::load(scale)), None);
    dag.add_fft(spec(&p8, Direction::Forward, &i8d, &out_c, lp()))?;
    dag.add_fft(spec(&p16, Direction::Forward, &i16d, &out_c2, lp()))?;
    dag.add_fft(spec(&pr, Direction::Forward, &r8d, &out_r, lp()))?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let x8: Vec<C64> = raw
        .iter()
        .map(|v| C64::new(v[0] as f64, v[1] as f64) * scale as f64)
        .collect();
    check(&out_c.to_vec()?, &reference(&x8, n, false), "complex i8")?;
    let x16: Vec<C64> = raw16
        .iter()
        .map(|v| C64::new(v[0] as f64, v[1] as f64) * scale as f64)
        .collect();
    check(&out_c2.to_vec()?, &reference(&x16, n, false), "complex i16")?;
    let xr: Vec<C64> = real8
        .iter()
        .map(|&v| C64::new(v as f64 * scale as f64, 0.0))
        .collect();
    check(
        &out_r.to_vec()?,
        &reference(&xr, n, false)[..n / 2 + 1],
        "real i8 (R2C)",
    )
}

register!(gpu "fft::store_callbacks_scale_power_accumulate" => stores);
fn stores(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 2048usize;
    let x = signal(n, 4);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let scaled = DeviceBuffer::<C32>::zeros(d, n)?;
    let power = DeviceBuffer::<f32>::zeros(d, n)?;
    let acc = DeviceBuffer::<f32>::zeros(d, n)?;
    let ps = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_store(StoreCallback::Scale),
    )?;
    let pp = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_store(StoreCallback::Power),
    )?;
    let mut dag = Dag::new();
    dag.add_fft(spec(
        &ps,
        Direction::Forward,
        &xd,
        &scaled,
        ld_st(None, Some(CallbackParams::store(1.0 / n as f32))),
    ))?;
    dag.add_fft(spec(
        &pp,
        Direction::Forward,
        &xd,
        &power,
        ld_st(None, Some(CallbackParams::store(0.5))),
    ))?;
    dag.add_fft(spec(
        &pp,
        Direction::Forward,
        &xd,
        &acc,
        ld_st(
            None,
            Some(CallbackParams::Store {
                scale: 1.0,
                output: None,
                accumulate: true,
            }),
        ),
    ))?;
    let mut exec = dag.instantiate(d)?;
    for _ in 0..3 {
        exec.launch(&gpu.stream)?;
    }
    exec.synchronize()?;
    let f = reference(&to64(&x), n, false);
    let want: Vec<C64> = f.iter().map(|c| c / n as f64).collect();
    check(&scaled.to_vec()?, &want, "scale 1/N")?;
    let p: Vec<f64> = f.iter().map(|c| c.norm_sqr() * 0.5).collect();
    check_real(&power.to_vec()?, &p, "power")?;
    let p3: Vec<f64> = f.iter().map(|c| c.norm_sqr() * 3.0).collect();
    check_real(&acc.to_vec()?, &p3, "accumulated power over 3 launches")
}

register!(gpu "fft::r2c_c2r" => r2c_c2r);
fn r2c_c2r(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (1000usize, 3usize);
    let h = n / 2 + 1;
    let x: Vec<f32> = (0..n * batch)
        .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let spec_d = DeviceBuffer::<C32>::zeros(d, h * batch)?;
    let back = DeviceBuffer::<f32>::zeros(d, n * batch)?;
    let r2c = FftPlan::new(FftPlanDesc::new(FftType::R2C, &[n as i64], batch as i64))?;
    let c2r = FftPlan::new(
        FftPlanDesc::new(FftType::C2R, &[n as i64], batch as i64).with_store(StoreCallback::Scale),
    )?;
    let mut dag = Dag::new();
    let a = dag.add_fft(spec(
        &r2c,
        Direction::Forward,
        &xd,
        &spec_d,
        FftParams::none(),
    ))?;
    let b = dag.add_fft(spec(
        &c2r,
        Direction::Inverse,
        &spec_d,
        &back,
        ld_st(None, Some(CallbackParams::store(1.0 / n as f32))),
    ))?;
    dag.add_dependency(a, b)?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let xc: Vec<C64> = x.iter().map(|&v| C64::new(v as f64, 0.0)).collect();
    let full = reference(&xc, n, false);
    let want: Vec<C64> = full.chunks(n).flat_map(|c| c[..h].to_vec()).collect();
    check(&spec_d.to_vec()?, &want, "R2C")?;
    check_real(
        &back.to_vec()?,
        &x.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        "C2R round trip",
    )
}

register!(gpu "fft::two_dimensional_batched" => two_d);
fn two_d(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (rows, cols, batch) = (32usize, 48usize, 4usize);
    let x = signal(rows * cols * batch, 5);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let yd = DeviceBuffer::<C32>::zeros(d, x.len())?;
    let plan = FftPlan::new(FftPlanDesc::new(
        FftType::C2C,
        &[rows as i64, cols as i64],
        batch as i64,
    ))?;
    let mut dag = Dag::new();
    dag.add_fft(spec(&plan, Direction::Forward, &xd, &yd, FftParams::none()))?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    // Reference: rows, then columns, per batch.
    let mut want = reference(&to64(&x), cols, false);
    let mut p = FftPlanner::<f64>::new();
    let col = p.plan_fft_forward(rows);
    for b in 0..batch {
        for c in 0..cols {
            let mut v: Vec<C64> = (0..rows)
                .map(|r| want[b * rows * cols + r * cols + c])
                .collect();
            col.process(&mut v);
            for (r, val) in v.into_iter().enumerate() {
                want[b * rows * cols + r * cols + c] = val;
            }
        }
    }
    check(&yd.to_vec()?, &want, "2D batched")
}

register!(gpu "fft::double_precision" => double_precision);
fn double_precision(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 4096usize;
    let x: Vec<C64> = signal(n, 6)
        .iter()
        .map(|c| C64::new(c.re as f64, c.im as f64))
        .collect();
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let yd = DeviceBuffer::<C64>::zeros(d, n)?;
    let plan = FftPlan::new(FftPlanDesc::new(FftType::Z2Z, &[n as i64], 1))?;
    let mut dag = Dag::new();
    dag.add_fft(spec(&plan, Direction::Forward, &xd, &yd, FftParams::none()))?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let want = reference(&x, n, false);
    let got = yd.to_vec()?;
    let err = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).norm())
        .fold(0.0, f64::max);
    let scale = want.iter().map(|c| c.norm()).fold(0.0, f64::max);
    ensure!(
        err <= 1e-12 * scale,
        "double precision error {err:e} vs {scale:e}"
    );
    Ok(())
}

register!(gpu "fft::user_defined_callback" => custom_callback);
/// A user-defined load callback: a Hann-like window with a per-node gain.
fn custom_callback(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 512usize;
    let source = r#"
struct window_params { float gain; int n; };
__device__ float2 window_load(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const window_params* p = (const window_params*)info;
    float2 v = ((const float2*)dataIn)[offset];
    int i = (int)(offset % p->n);
    float w = p->gain * (0.5f - 0.5f * cospif(2.0f * i / p->n));
    return make_float2(v.x * w, v.y * w);
}"#;
    let cb = CustomCallback {
        source: source.into(),
        function: "window_load".into(),
        params_size: 8,
        elem_bytes: 8,
    };
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 2).with_load(LoadCallback::Custom(cb)),
    )?;
    let x = signal(2 * n, 7);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let yd = DeviceBuffer::<C32>::zeros(d, 2 * n)?;
    #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    #[repr(C)]
    struct WindowParams {
        gain: f32,
        n: i32,
    }
    let mut dag = Dag::new();
    let node = dag.add_fft(spec(
        &plan,
        Direction::Forward,
        &xd,
        &yd,
        ld_st(
            Some(CallbackParams::custom(WindowParams {
                gain: 2.0,
                n: n as i32,
            })),
            None,
        ),
    ))?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let windowed = |gain: f64| -> Vec<C64> {
        to64(&x)
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let i = (k % n) as f64;
                v * gain * (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i / n as f64).cos())
            })
            .collect()
    };
    check(
        &yd.to_vec()?,
        &reference(&windowed(2.0), n, false),
        "custom window, gain 2",
    )?;
    exec.set_fft_params(
        node,
        ld_st(
            Some(CallbackParams::custom(WindowParams {
                gain: -1.0,
                n: n as i32,
            })),
            None,
        ),
    )?;
    gpu.launch_and_wait(&mut exec)?;
    check(
        &yd.to_vec()?,
        &reference(&windowed(-1.0), n, false),
        "custom window, gain -1",
    )?;
    let e = exec
        .set_fft_params(node, ld_st(Some(CallbackParams::custom(1.0f32)), None))
        .unwrap_err();
    ensure!(
        e.to_string().contains("takes 8 parameter bytes, not 4"),
        "{e}"
    );
    Ok(())
}

register!(gpu "fft::updates_while_launches_are_queued" => queued_updates);
/// Updates of callback parameters while earlier launches are still queued (behind a slow
/// kernel) affect only later launches.
fn queued_updates(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let spin = gpu.kernel("spin")?;
    let (n, launches) = (256usize, 16usize);
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], 1).with_store(StoreCallback::Scale),
    )?;
    let x = signal(n, 8);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let ring = DeviceBuffer::<C32>::zeros(d, n * launches)?;
    let mut dag = Dag::new();
    let node = dag.add_fft(spec(
        &plan,
        Direction::Forward,
        &xd,
        &ring,
        ld_st(None, Some(CallbackParams::store(1.0))),
    ))?;
    let mut exec = dag.instantiate(d)?;
    let s = Stream::new(d)?;
    spin.launch(&s, LaunchConfig::new(1, 1), &args![200_000_000i64])?;
    for i in 0..launches {
        exec.set_fft_params(
            node,
            ld_st(
                None,
                Some(CallbackParams::Store {
                    scale: (i + 1) as f32,
                    output: Some(ring.region(i * n..(i + 1) * n)),
                    accumulate: false,
                }),
            ),
        )?;
        exec.launch(&s)?;
    }
    exec.synchronize()?;
    let f = reference(&to64(&x), n, false);
    let got = ring.to_vec()?;
    for i in 0..launches {
        let want: Vec<C64> = f.iter().map(|c| c * (i + 1) as f64).collect();
        check(
            &got[i * n..(i + 1) * n],
            &want,
            &format!("queued launch {i}"),
        )?;
    }
    Ok(())
}

register!(gpu "fft::advanced_layout" => advanced_layout);
fn advanced_layout(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    // Batches of 128 points, interleaved two channels (stride 2), batch distance 300.
    let (n, batch, stride, dist) = (128usize, 3usize, 2usize, 300usize);
    let x = signal(dist * batch, 9);
    let xd = DeviceBuffer::from_slice(d, &x)?;
    let yd = DeviceBuffer::<C32>::zeros(d, n * batch)?;
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64).with_layout(cudagraph::Layout {
            inembed: vec![n as i64],
            istride: stride as i64,
            idist: dist as i64,
            onembed: vec![n as i64],
            ostride: 1,
            odist: n as i64,
        }),
    )?;
    let mut dag = Dag::new();
    dag.add_fft(spec(&plan, Direction::Forward, &xd, &yd, FftParams::none()))?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let gathered: Vec<C32> = (0..batch)
        .flat_map(|b| (0..n).map(move |i| (b, i)))
        .map(|(b, i)| x[b * dist + i * stride])
        .collect();
    check(
        &yd.to_vec()?,
        &reference(&to64(&gathered), n, false),
        "strided input",
    )
}

register!(gpu "fft::stream_fft_matches_graph" => stream_fft);
/// `StreamFft` (the graph-free baseline) computes the same as an FFT node, per call parameters
/// included.
fn stream_fft(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let (n, batch) = (256usize, 16usize);
    let plan = FftPlan::new(
        FftPlanDesc::new(FftType::C2C, &[n as i64], batch as i64)
            .with_load(LoadCallback::ComplexI8)
            .with_store(StoreCallback::Scale),
    )?;
    let raw: Vec<[i8; 2]> = (0..n * batch)
        .map(|i| [((i * 7) % 255) as i8, ((i * 3) % 127) as i8])
        .collect();
    let input = DeviceBuffer::from_slice(d, &raw)?;
    let outs: Vec<_> = (0..4)
        .map(|_| DeviceBuffer::<C32>::zeros(d, n * batch))
        .collect::<Result<_, _>>()?;
    let mut fft = StreamFft::new(d, &plan)?;
    for (i, out) in outs.iter().enumerate() {
        let p = ld_st(
            Some(CallbackParams::load(0.5)),
            Some(CallbackParams::store(i as f32 + 1.0)),
        );
        fft.exec(
            &gpu.stream,
            Direction::Forward,
            &input.region(..),
            &out.region(..),
            &p,
        )?;
    }
    gpu.stream.synchronize()?;
    let x: Vec<C64> = raw
        .iter()
        .map(|v| C64::new(v[0] as f64, v[1] as f64) * 0.5)
        .collect();
    let f = reference(&x, n, false);
    for (i, out) in outs.iter().enumerate() {
        let want: Vec<C64> = f.iter().map(|c| c * (i as f64 + 1.0)).collect();
        check(&out.to_vec()?, &want, &format!("stream call {i}"))?;
    }
    let e = fft
        .exec(
            &gpu.stream,
            Direction::Forward,
            &input.region(..),
            &outs[0].region(..),
            &FftParams::none(),
        )
        .unwrap_err();
    ensure!(e.to_string().contains("needs load parameters"), "{e}");
    Ok(())
}

register!(gpu "fft::disable_and_enable" => disable_and_enable);
/// An FFT node disabled for some launches does nothing on them (its captured kernels, its
/// parameter-setting kernel and, unfused, its conversion kernel are all disabled); parameters
/// set while it is disabled apply once it is enabled again. In both forms, with an int8 load
/// and an accumulating power store.
fn disable_and_enable(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let n = 4096usize;
    let raw = ci8(n, 9);
    let xd = DeviceBuffer::from_slice(d, &raw)?;
    let store = |scale: f32| CallbackParams::Store {
        scale,
        output: None,
        accumulate: true,
    };
    let f = reference(&ci8_64(&raw, 1.0), n, false);
    for (fusion, form) in FORMS {
        let acc = DeviceBuffer::<f32>::zeros(d, n)?;
        let plan = FftPlan::new(
            FftPlanDesc::new(FftType::C2C, &[n as i64], 1)
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Power)
                .with_fusion(fusion),
        )?;
        let mut dag = Dag::new();
        let node = dag.add_fft(spec(
            &plan,
            Direction::Forward,
            &xd,
            &acc,
            ld_st(Some(CallbackParams::load(1.0)), Some(store(1.0))),
        ))?;
        let mut exec = dag.instantiate(d)?;
        ensure!(exec.fft_fusion(node)?.form == form, "{form:?} requested");
        exec.launch(&gpu.stream)?; // +1
        exec.set_enabled(node, false)?;
        exec.launch(&gpu.stream)?; // nothing
        exec.set_fft_params(
            node,
            ld_st(Some(CallbackParams::load(2.0)), Some(store(10.0))),
        )?;
        exec.launch(&gpu.stream)?; // nothing
        exec.synchronize()?;
        let p1: Vec<f64> = f.iter().map(|c| c.norm_sqr()).collect();
        check_real(
            &acc.to_vec()?,
            &p1,
            &format!("{form:?}: one enabled launch"),
        )?;
        exec.set_enabled(node, true)?;
        exec.launch(&gpu.stream)?; // + 10 * |2 X|^2 = 40 |X|^2
        exec.synchronize()?;
        let p41: Vec<f64> = f.iter().map(|c| c.norm_sqr() * 41.0).collect();
        check_real(
            &acc.to_vec()?,
            &p41,
            &format!("{form:?}: enabled again, with the parameters set while disabled"),
        )?;
        ensure!(
            exec.dag().node(node)?.is_enabled(),
            "the DAG's copy says enabled"
        );
    }
    Ok(())
}

/// Both forms an FFT node is lowered in (the fused and unfused tests, `fft_forms.rs`).
pub(crate) const FORMS: [(Fusion, FftForm); 2] = [
    (Fusion::Fused, FftForm::Fused),
    (Fusion::Unfused, FftForm::Unfused),
];

pub(crate) fn ci8(len: usize, seed: usize) -> Vec<[i8; 2]> {
    (0..len)
        .map(|i| {
            [
                ((i * 37 + seed * 11) % 255) as u8 as i8,
                ((i * 11 + seed * 5) % 201) as u8 as i8,
            ]
        })
        .collect()
}

pub(crate) fn ci8_64(x: &[[i8; 2]], scale: f32) -> Vec<C64> {
    x.iter()
        .map(|v| C64::new(v[0] as f64, v[1] as f64) * scale as f64)
        .collect()
}
