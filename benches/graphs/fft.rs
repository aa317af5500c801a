//! Experiment `fft`: batched small transforms of 8-bit complex input, as an FFT node in a graph
//! in each form (fused: LTO load callback; unfused: the node's conversion kernel + a plan
//! without the load callback; auto: the form the crate measured as faster), as the fused cuFFT
//! plan called on a stream, and unfused on a stream (conversion kernel + plain cuFFT).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudagraph::fft::{Fusion, FusionDecision};
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

pub const FFT_GRAPH: &str = "cudagraph: FFT node, fused (LTO load callback), Exec::launch";
pub const FFT_GRAPH_UPD: &str = "cudagraph: fused, Exec::set_fft_params + Exec::launch";
pub const FFT_GRAPH_UNF: &str = "cudagraph: FFT node, unfused (convert + FFT), Exec::launch";
pub const FFT_GRAPH_AUTO: &str = "cudagraph: FFT node, auto (measured choice), Exec::launch";
pub const FFT_STREAM: &str = "stream: StreamFft::exec (fused)";
pub const FFT_UNFUSED: &str = "unfused: int8→float kernel + plain StreamFft::exec";

/// The methods, in `FftCase::submit` order: label and the row its ratio compares with.
pub const FFT_METHODS: [(&str, Option<&str>); 6] = [
    (FFT_GRAPH, Some(FFT_STREAM)),
    (FFT_GRAPH_UPD, Some(FFT_STREAM)),
    (FFT_STREAM, None),
    (FFT_UNFUSED, Some(FFT_STREAM)),
    (FFT_GRAPH_UNF, Some(FFT_GRAPH)),
    (FFT_GRAPH_AUTO, Some(FFT_GRAPH)),
];
/// The methods whose output `FftCase::check` compares with rustfft, with their output index.
const FFT_CHECKED: [(usize, usize); 5] = [(0, 0), (2, 1), (3, 2), (4, 3), (5, 4)];

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
    /// Outputs of the fused graph, the stream, the unfused stream, the unfused graph and the
    /// auto graph methods.
    pub outs: [DeviceBuffer<FftC32>; 5],
    /// The fused FFT node's graph (also the update method's).
    pub exec: Exec,
    pub node: NodeId,
    /// The graphs of the unfused and the auto FFT nodes.
    pub exec_unfused: Exec,
    pub exec_auto: Exec,
    /// The form `Fusion::Auto` chose for this shape, and why.
    pub auto: FusionDecision,
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
        let loaded = desc.clone().with_load(LoadCallback::ComplexI8);
        let fused_plan = FftPlan::new(loaded.clone().with_fusion(Fusion::Fused))?;
        let unfused_plan = FftPlan::new(loaded.clone().with_fusion(Fusion::Unfused))?;
        let auto_plan = FftPlan::new(loaded)?;
        let plain_plan = FftPlan::new(desc)?;
        let input = DeviceBuffer::from_slice(d, &fft_signal(elems, (points + batch) as u32))?;
        let outs = [
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
            DeviceBuffer::zeros(d, elems)?,
        ];
        let load = |scale: f32| FftParams {
            load: Some(CallbackParams::load(scale)),
            store: None,
        };
        let params = load(FFT_SCALE);
        let graph = |plan: &FftPlan, out: &DeviceBuffer<FftC32>| -> Result<(Exec, NodeId)> {
            let mut dag = Dag::new();
            let node = dag.add_fft(FftSpec {
                plan: plan.clone(),
                direction: Direction::Forward,
                input: (&input).into(),
                output: out.into(),
                params: params.clone(),
            })?;
            let exec = dag
                .instantiate(d)
                .with_context(|| format!("instantiating the FFT graph ({:?})", plan.fusion()))?;
            Ok((exec, node))
        };
        let (exec, node) = graph(&fused_plan, &outs[0])?;
        let (exec_unfused, _) = graph(&unfused_plan, &outs[3])?;
        let (exec_auto, auto_node) = graph(&auto_plan, &outs[4])?;
        let auto = exec_auto.fft_fusion(auto_node)?;
        Ok(FftCase {
            points,
            batch,
            converted: DeviceBuffer::zeros(d, elems)?,
            input,
            outs,
            exec,
            node,
            exec_unfused,
            exec_auto,
            auto,
            fused: StreamFft::new(d, &fused_plan).context("the LTO-callback StreamFft")?,
            plain: StreamFft::new(d, &plain_plan).context("the plain StreamFft")?,
            params,
            other_params: load(2.0 * FFT_SCALE),
            convert_cfg: LaunchConfig::for_elements(elems as u32, 256),
        })
    }

    /// Queues iteration `k` of method `m` (0 fused graph, 1 fused graph with an update,
    /// 2 stream, 3 unfused stream, 4 unfused graph, 5 auto graph) on the bench's stream.
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
            4 => self.exec_unfused.launch(s)?,
            5 => self.exec_auto.launch(s)?,
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

    /// Waits for every method's work.
    fn wait(&mut self, b: &Bench) -> Result<()> {
        b.sync()?;
        self.exec.synchronize()?;
        self.exec_unfused.synchronize()?;
        self.exec_auto.synchronize()?;
        Ok(())
    }

    /// Runs every method but the update one once (scale `FFT_SCALE`) into zeroed outputs and
    /// compares them with rustfft (f64). Returns the worst relative error.
    pub fn check(&mut self, b: &Bench, convert: &Kernel) -> Result<f64> {
        self.wait(b)?;
        for o in &self.outs {
            o.memset_bytes(0)?;
        }
        b.device.synchronize()?;
        self.exec.set_fft_params(self.node, self.params.clone())?;
        for (m, _) in FFT_CHECKED {
            self.submit(b, convert, m, 0)?;
        }
        self.wait(b)?;
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
        for (m, o) in FFT_CHECKED {
            let name = FFT_METHODS[m].0;
            let got = self.outs[o].to_vec()?;
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

/// FFT: batched small transforms of 8-bit complex input, as an FFT node in a graph in each
/// form (fused, unfused, auto), as the fused cuFFT plan called on a stream, and unfused on a
/// stream (conversion kernel + plain cuFFT).
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
                integers scaled by 1/128 on load. Methods: the crate's FFT node in each form: \
                fused (`Fusion::Fused`: plan with an LTO load callback `ComplexI8`; the graph \
                also holds the node's parameter-setting kernel), launched as is or after \
                `Exec::set_fft_params` each time; unfused (`Fusion::Unfused`: the node's \
                conversion kernel writing complex float to its scratch buffer, then a plan \
                without the load callback); auto (`Fusion::Auto`, the default: the form the \
                crate measured as faster for the shape, once, remembered on disk); the fused \
                plan called on a stream with `StreamFft::exec` (a parameter-setting kernel + \
                `cufftExecC2C`); unfused on a stream: an NVRTC kernel converting int8 → complex \
                float, then a callback-free plan with `StreamFft::exec`.";
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
    let rows: Vec<(usize, usize)> = FFT_METHODS
        .iter()
        .map(|&(l, vs)| (gpu.row(l, vs), cpu.row(l, vs)))
        .collect();
    let methods = FFT_METHODS.len();
    let mut choices = Vec::new();
    let mut worst_err = 0f64;
    for (ci, &(points, batch)) in configs.iter().enumerate() {
        let t0 = Instant::now();
        let mut case = FftCase::new(b, points, batch)?;
        let made = t0.elapsed().as_secs_f64();
        // Warm-up: every method a few times (the first graph launch uploads the graph).
        for m in 0..methods {
            for k in 0..4 {
                case.submit(b, &convert, m, k)?;
            }
        }
        case.wait(b)?;
        // Before measuring: all three compute the right transform.
        worst_err = worst_err.max(case.check(b, &convert)?);
        let mut gpu_s = vec![Vec::new(); methods];
        let mut cpu_s = vec![Vec::new(); methods];
        for rep in 0..reps {
            // Rotate which method goes first.
            for m in (0..methods).map(|k| (k + rep) % methods) {
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
        case.wait(b)?;
        for (m, &(rg, rc)) in rows.iter().enumerate() {
            gpu.set(rg, ci, median(&mut gpu_s[m]));
            cpu.set(rc, ci, median(&mut cpu_s[m]));
        }
        choices.push(format!("{points}×{batch}: {}", case.auto.describe()));
        progress(
            &format!(
                "fft, {points}×{batch} (plans and graphs made in {made:.2} s, {reps} reps; auto: {})",
                case.auto.describe()
            ),
            t_start,
        );
        drop(case);
    }
    println!(
        "FFT auto choices ({}): {}\n",
        match std::env::var(cudagraph::fft::FUSION_ENV) {
            Ok(v) => format!("{}={v}", cudagraph::fft::FUSION_ENV),
            Err(_) => "measured, remembered or read from the on-disk cache".into(),
        },
        choices.join("; ")
    );
    println!(
        "FFT correctness: the fused, unfused and auto graph outputs and the stream and unfused \
         stream outputs match rustfft (f64) in every configuration; worst error \
         {worst_err:.1e} × max |reference| (tolerance {FFT_TOL:e})\n"
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
    let (detail, worst) = min_ratios(&gpu, FFT_GRAPH_AUTO, FFT_GRAPH, FFT_GRAPH_UNF);
    report.target(
        "FFT node (auto) as fast as the faster of its two forms (GPU time, auto / min(fused \
         node, unfused node); ratio ≤ 1.02, 2% for noise)"
            .into(),
        detail,
        worst,
        1.02,
    );
    let (detail, worst) = column_ratios(&gpu, FFT_GRAPH_AUTO, FFT_UNFUSED);
    report.target(
        "FFT node (auto) never slower than the unfused alternative for the 8-bit input case \
         (GPU time, auto node / int8→float kernel + plain StreamFft; ratio ≤ 1.02, 2% for noise)"
            .into(),
        detail,
        worst,
        1.02,
    );
    report.table(gpu);
    report.table(cpu);
    Ok(())
}

/// Per column, row `label` over the smaller of rows `a` and `b`: the detail text and the worst
/// ratio (as `column_ratios`).
fn min_ratios(t: &Table, label: &str, a: &str, b: &str) -> (String, Option<f64>) {
    let find = |l: &str| t.rows.iter().find(|r| r.label == l);
    let (Some(r), Some(ra), Some(rb)) = (find(label), find(a), find(b)) else {
        return ("no such row".into(), None);
    };
    let mut parts = Vec::new();
    let mut worst: Option<f64> = None;
    for ni in 0..t.ns.len() {
        if let (Some(x), Some(y), Some(z)) = (r.values[ni], ra.values[ni], rb.values[ni]) {
            let q = x / y.min(z);
            parts.push(format!("{q:.2} ({})", t.column(ni)));
            worst = Some(worst.map_or(q, |w: f64| w.max(q)));
        }
    }
    match worst {
        Some(w) => (format!("{}; worst {w:.2}", parts.join(", ")), worst),
        None => ("no data".into(), None),
    }
}
