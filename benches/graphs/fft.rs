//! Experiment `fft`: batched small transforms of 8-bit complex input, as an FFT node in a graph,
//! as the same cuFFT plan called on a stream, and unfused (conversion kernel + plain cuFFT).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudagraph::{
    args, CallbackParams, Dag, DeviceBuffer, Direction, Exec, FftParams, FftPlan, FftPlanDesc,
    FftSpec, FftType, Kernel, LaunchConfig, LoadCallback, Module, NodeId, StreamFft,
};

use crate::bench::{progress, Bench};
use crate::host::median;
use crate::report::{column_ratios, Report, Table};

/// Transform sizes of the FFT experiment.
pub const FFT_POINTS: [usize; 2] = [256, 4096];
/// Batch sizes of the FFT experiment.
pub const FFT_BATCHES: [usize; 4] = [1, 16, 256, 1024];
/// Back-to-back iterations per timed repetition.
pub const FFT_ITERS: usize = 200;
/// Timed repetitions per method and configuration (scaled by `CUDAGRAPH_BENCH_REPS_SCALE`).
pub const FFT_REPS: usize = 7;
/// The load callback's (and the conversion kernel's) scale.
pub const FFT_SCALE: f32 = 1.0 / 128.0;
/// Correctness check: largest absolute error ≤ `FFT_TOL` × largest reference magnitude.
pub const FFT_TOL: f64 = 1e-4;

pub const FFT_GRAPH: &str = "cudagraph: FFT node, Exec::launch";
pub const FFT_GRAPH_UPD: &str = "cudagraph: Exec::set_fft_params + Exec::launch";
pub const FFT_STREAM: &str = "stream: StreamFft::exec";
pub const FFT_UNFUSED: &str = "unfused: int8→float kernel + plain StreamFft::exec";

/// The unfused method's conversion: complex int8 → complex float, times `scale` (the same
/// arithmetic as the built-in `ComplexI8` load callback).
pub const FFT_CONVERT_SOURCE: &str = r#"
extern "C" __global__ void ci8_to_cf32(float2* out, const char2* in, float scale, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        char2 v = in[i];
        out[i] = make_float2(v.x * scale, v.y * scale);
    }
}
"#;

pub type FftC32 = rustfft::num_complex::Complex<f32>;
pub type FftC64 = rustfft::num_complex::Complex<f64>;

/// One (points, batch) configuration: its buffers, plans and executable graph, made once.
pub struct FftCase {
    pub points: usize,
    pub batch: usize,
    pub input: DeviceBuffer<[i8; 2]>,
    /// The unfused method's converted input.
    pub converted: DeviceBuffer<FftC32>,
    /// Outputs of the graph, the stream and the unfused methods.
    pub outs: [DeviceBuffer<FftC32>; 3],
    pub exec: Exec,
    pub node: NodeId,
    /// The LTO-callback plan (load `ComplexI8`) on a stream.
    pub fused: StreamFft,
    /// The callback-free plan on a stream.
    pub plain: StreamFft,
    /// The load parameters (scale `FFT_SCALE`), and another set for the update method.
    pub params: FftParams,
    pub other_params: FftParams,
    pub convert_cfg: LaunchConfig,
}

impl FftCase {
    pub fn new(b: &Bench, points: usize, batch: usize) -> Result<FftCase> {
        let d = &b.device;
        let elems = points * batch;
        let desc = FftPlanDesc::new(FftType::C2C, &[points as i64], batch as i64);
        let fused_plan = FftPlan::new(desc.clone().with_load(LoadCallback::ComplexI8))?;
        let plain_plan = FftPlan::new(desc)?;
        let input = DeviceBuffer::from_slice(d, &fft_signal(elems, (points + batch) as u32))?;
        let outs = [
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
        ];
        let load = |scale: f32| FftParams {
            load: Some(CallbackParams::load(scale)),
            store: None,
        };
        let params = load(FFT_SCALE);
        let mut dag = Dag::new();
        let node = dag.add_fft(FftSpec {
            plan: fused_plan.clone(),
            direction: Direction::Forward,
            input: (&input).into(),
            output: (&outs[0]).into(),
            params: params.clone(),
        })?;
        let exec = dag.instantiate(d).context("instantiating the FFT graph")?;
        Ok(FftCase {
            points,
            batch,
            converted: DeviceBuffer::zeros(d, elems)?,
            input,
            outs,
            exec,
            node,
            fused: StreamFft::new(d, &fused_plan).context("the LTO-callback StreamFft")?,
            plain: StreamFft::new(d, &plain_plan).context("the plain StreamFft")?,
            params,
            other_params: load(2.0 * FFT_SCALE),
            convert_cfg: LaunchConfig::for_elements(elems as u32, 256),
        })
    }

    /// Queues iteration `k` of method `m` (0 graph, 1 graph with an update, 2 stream,
    /// 3 unfused) on the bench's stream.
    pub fn submit(&mut self, b: &Bench, convert: &Kernel, m: usize, k: usize) -> Result<()> {
        let s = &b.stream;
        match m {
            0 => self.exec.launch(s)?,
            1 => {
                let p = if k.is_multiple_of(2) {
                    &self.params
                } else {
                    &self.other_params
                };
                self.exec.set_fft_params(self.node, p.clone())?;
                self.exec.launch(s)?;
            }
            2 => self.fused.exec(
                s,
                Direction::Forward,
                &(&self.input).into(),
                &(&self.outs[1]).into(),
                &self.params,
            )?,
            _ => {
                let n = (self.points * self.batch) as u32;
                convert.launch(
                    s,
                    self.convert_cfg,
                    &args![&self.converted, &self.input, FFT_SCALE, n],
                )?;
                self.plain.exec(
                    s,
                    Direction::Forward,
                    &(&self.converted).into(),
                    &(&self.outs[2]).into(),
                    &FftParams::none(),
                )?;
            }
        }
        Ok(())
    }

    /// Runs the graph, the stream and the unfused methods once each (scale `FFT_SCALE`) into
    /// zeroed outputs and compares all three with rustfft (f64). Returns the worst relative
    /// error.
    pub fn check(&mut self, b: &Bench, convert: &Kernel) -> Result<f64> {
        b.sync()?;
        self.exec.synchronize()?;
        for o in &self.outs {
            o.memset_bytes(0)?;
        }
        b.device.synchronize()?;
        self.exec.set_fft_params(self.node, self.params.clone())?;
        for m in [0, 2, 3] {
            self.submit(b, convert, m, 0)?;
        }
        b.sync()?;
        self.exec.synchronize()?;
        let x: Vec<FftC64> = self
            .input
            .to_vec()?
            .iter()
            .map(|v| FftC64::new(v[0] as f64, v[1] as f64) * FFT_SCALE as f64)
            .collect();
        let mut want = x;
        let fft = rustfft::FftPlanner::<f64>::new().plan_fft_forward(self.points);
        for chunk in want.chunks_mut(self.points) {
            fft.process(chunk);
        }
        let mag = want
            .iter()
            .map(|c| c.norm())
            .fold(f64::MIN_POSITIVE, f64::max);
        let mut worst = 0f64;
        for (o, name) in self.outs.iter().zip([FFT_GRAPH, FFT_STREAM, FFT_UNFUSED]) {
            let got = o.to_vec()?;
            let err = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (FftC64::new(g.re as f64, g.im as f64) - w).norm())
                .fold(0.0, f64::max);
            let rel = err / mag;
            if rel > FFT_TOL || rel.is_nan() {
                bail!(
                    "FFT {}x{}: {name} is wrong: max error {err:e} = {rel:e} x max |reference| \
                     (tolerance {FFT_TOL:e})",
                    self.points,
                    self.batch
                );
            }
            worst = worst.max(rel);
        }
        Ok(worst)
    }
}

/// Pseudo-random complex 8-bit samples (xorshift).
pub fn fft_signal(len: usize, seed: u32) -> Vec<[i8; 2]> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s >> 24) as u8 as i8
    };
    (0..len).map(|_| [next(), next()]).collect()
}

/// FFT: batched small transforms of 8-bit complex input, as an FFT node in a graph, as the
/// same cuFFT plan called on a stream, and unfused (conversion kernel + plain cuFFT).
pub fn fft_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    cudagraph::fft::nvjitlink_available()
        .context("the FFT experiment's load callback is an LTO callback (needs libnvJitLink)")?;
    let convert = Module::from_source(&b.device, FFT_CONVERT_SOURCE)
        .context("compiling the conversion kernel with NVRTC")?
        .kernel("ci8_to_cf32")?;
    let configs: Vec<(usize, usize)> = FFT_POINTS
        .iter()
        .flat_map(|&p| FFT_BATCHES.iter().map(move |&bt| (p, bt)))
        .collect();
    let columns: Vec<String> = configs.iter().map(|(p, bt)| format!("{p}×{bt}")).collect();
    let reps = ((FFT_REPS as f64 * b.reps_scale).round() as usize).max(3);
    let what = "C2C forward transforms, columns points×batch; the input is complex 8-bit \
                integers scaled by 1/128 on load. Methods: the crate's FFT node (plan with an LTO \
                load callback `ComplexI8`; the graph also holds the node's parameter-setting \
                kernel), launched as is or after `Exec::set_fft_params` each time; the same plan \
                called on a stream with `StreamFft::exec` (a parameter-setting kernel + \
                `cufftExecC2C`; same LTO-callback plan); unfused: an NVRTC kernel converting int8 → complex float, then \
                a callback-free plan with `StreamFft::exec`.";
    let mut gpu = Table::configs(
        "fft-gpu",
        "FFT, 8-bit complex input: GPU time per iteration",
        &format!(
            "{what} {FFT_ITERS} iterations back to back between two CUDA events, divided by \
             {FFT_ITERS}; median of {reps} repetitions. When the host issues slower than the \
             GPU runs (small transforms), this is the issue rate."
        ),
        columns.clone(),
        "iteration",
    );
    let mut cpu = Table::configs(
        "fft-cpu",
        "FFT, 8-bit complex input: CPU time per iteration",
        &format!(
            "{what} Wall time of the calls that queue {FFT_ITERS} iterations, divided by \
             {FFT_ITERS}; median of {reps} repetitions."
        ),
        columns,
        "iteration",
    );
    let rows: Vec<(usize, usize)> = [
        (FFT_GRAPH, Some(FFT_STREAM)),
        (FFT_GRAPH_UPD, Some(FFT_STREAM)),
        (FFT_STREAM, None),
        (FFT_UNFUSED, Some(FFT_STREAM)),
    ]
    .iter()
    .map(|&(l, vs)| (gpu.row(l, vs), cpu.row(l, vs)))
    .collect();
    let mut worst_err = 0f64;
    for (ci, &(points, batch)) in configs.iter().enumerate() {
        let t0 = Instant::now();
        let mut case = FftCase::new(b, points, batch)?;
        let made = t0.elapsed().as_secs_f64();
        // Warm-up: every method a few times (the first graph launch uploads the graph).
        for m in 0..4 {
            for k in 0..4 {
                case.submit(b, &convert, m, k)?;
            }
        }
        b.sync()?;
        case.exec.synchronize()?;
        // Before measuring: all three compute the right transform.
        worst_err = worst_err.max(case.check(b, &convert)?);
        let mut gpu_s = vec![Vec::new(); 4];
        let mut cpu_s = vec![Vec::new(); 4];
        for rep in 0..reps {
            // Rotate which method goes first.
            for m in (0..4).map(|k| (k + rep) % 4) {
                b.sync()?;
                b.start.record(&b.stream)?;
                let t0 = Instant::now();
                for k in 0..FFT_ITERS {
                    case.submit(b, &convert, m, k)?;
                }
                let t = t0.elapsed();
                b.end.record(&b.stream)?;
                b.end.synchronize()?;
                cpu_s[m].push(t.as_secs_f64() * 1e6 / FFT_ITERS as f64);
                gpu_s[m].push(b.start.elapsed_ms(&b.end)? as f64 * 1e3 / FFT_ITERS as f64);
            }
        }
        b.sync()?;
        case.exec.synchronize()?;
        for (m, &(rg, rc)) in rows.iter().enumerate() {
            gpu.set(rg, ci, median(&mut gpu_s[m]));
            cpu.set(rc, ci, median(&mut cpu_s[m]));
        }
        drop(case);
        progress(
            &format!("fft, {points}×{batch} (plans and graph made in {made:.2} s, {reps} reps)"),
            t_start,
        );
    }
    println!(
        "FFT correctness: the graph, stream and unfused outputs match rustfft (f64) in every \
         configuration; worst error {worst_err:.1e} × max |reference| (tolerance {FFT_TOL:e})\n"
    );
    for (t, what) in [(&gpu, "GPU"), (&cpu, "CPU")] {
        let (detail, worst) = column_ratios(t, FFT_GRAPH, FFT_STREAM);
        report.target(
            format!(
                "FFT nodes in a graph no slower than the same cuFFT calls on a stream ({what} \
                 time, FFT node / StreamFft; ratio ≤ 1.02, 2% for noise)"
            ),
            detail,
            worst,
            1.02,
        );
    }
    let (detail, worst) = column_ratios(&gpu, FFT_GRAPH, FFT_UNFUSED);
    report.target(
        "FFT nodes faster than the unfused version for the 8-bit input case (GPU time, FFT \
         node / unfused; ratio < 1)"
            .into(),
        detail,
        worst,
        1.0 - 1e-9,
    );
    report.table(gpu);
    report.table(cpu);
    Ok(())
}
