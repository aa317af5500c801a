//! FFT round trip: the scenario FFT nodes were made for.
//!
//! A forward FFT node then an inverse FFT node, with different callback parameters, launched
//! 1,000 times in a loop with no synchronisation inside. Before each launch the loop updates
//! the scales of the forward transform and the output location of the inverse one (slot `i`
//! of a ring of 1,000 output slots). After the loop, one synchronisation, then every slot is
//! checked against a rustfft reference computed in `f64`.
//!
//! - Input: 4 × 4,096 complex 8-bit samples (`[i8; 2]`), read by the forward plan's
//!   `LoadCallback::ComplexI8` with a per-iteration scale `a_i`.
//! - Forward: C2C, `StoreCallback::Scale` with a per-iteration scale `b_i`, into `spectrum`.
//! - Inverse: C2C of `spectrum`, `StoreCallback::Scale` with `CallbackParams::Store { scale:
//!   1/N, output: Some(ring slot i), accumulate: false }`.
//! - Slot `i` must then hold `a_i · b_i · x` (the round trip of the input).
//!
//! Two plans, not one: a plan has one load callback for all its nodes, and the inverse
//! transform reads complex floats (the spectrum), which `ComplexI8` cannot load. "One plan,
//! a forward node and an inverse node with different callback parameters" exactly is covered
//! by the GPU test `fft::forward_then_inverse_1000_launches` (tests/gpu/fft.rs); this example
//! adds the 8-bit input.
//!
//! The same 1,000 iterations are then issued directly on a stream with [`StreamFft`] (one per
//! plan, same per-iteration parameters, writing into the same ring, zeroed in between) and
//! checked the same way. Timing: wall clock of the 1,000 iterations (updates and launches, or
//! the stream calls, then one synchronisation), after a warm-up; median of a few runs.
//!
//! Tolerance: in every slot, the largest absolute error must be at most `1e-4` times the
//! largest magnitude of the reference. The example exits non-zero when a check fails. Without
//! a GPU it says so and exits 0.
//!
//! Run with `cargo run --release --example fft_roundtrip`.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudagraph::{
    CallbackParams, Dag, Device, DeviceBuffer, Direction, Exec, FftParams, FftPlan, FftPlanDesc,
    FftSpec, FftType, LoadCallback, NodeId, Region, StoreCallback, Stream, StreamFft,
};
use rustfft::num_complex::Complex;
use rustfft::FftPlanner;

type C32 = Complex<f32>;
type C64 = Complex<f64>;

/// Points per transform.
const N: usize = 4096;
/// Transforms per plan execution.
const BATCH: usize = 4;
/// Complex elements of one execution (one ring slot).
const M: usize = N * BATCH;
/// Iterations of the loop, and slots of the ring.
const ITERS: usize = 1000;
/// Untimed iterations before the timed runs.
const WARMUP: usize = 20;
/// Timed runs of `ITERS` iterations per method (the median is reported).
const RUNS: usize = 5;
/// Largest error allowed, relative to the largest magnitude of the reference (per slot).
const TOL: f64 = 1e-4;

/// The forward transform's load scale in iteration `i`.
fn load_scale(i: usize) -> f32 {
    (1 + i % 7) as f32 / 128.0
}

/// The forward transform's store scale in iteration `i`.
fn store_scale(i: usize) -> f32 {
    0.5 + (i % 5) as f32 * 0.25
}

/// The factor slot `i` of the ring ends up with: `a_i · b_i` (the inverse's `1/N` undoes the
/// round trip's `N`).
fn factor(i: usize) -> f64 {
    load_scale(i) as f64 * store_scale(i) as f64
}

/// The input: pseudo-random complex 8-bit samples (xorshift).
fn input() -> Vec<[i8; 2]> {
    let mut s = 0x9e37_79b9u32;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s >> 24) as u8 as i8
    };
    (0..M).map(|_| [next(), next()]).collect()
}

/// Batched 1D transforms of `x` (each `N` long), in `f64`.
fn reference(x: &[C64], inverse: bool) -> Vec<C64> {
    let mut planner = FftPlanner::<f64>::new();
    let fft = if inverse {
        planner.plan_fft_inverse(N)
    } else {
        planner.plan_fft_forward(N)
    };
    let mut out = x.to_vec();
    for chunk in out.chunks_mut(N) {
        fft.process(chunk);
    }
    out
}

/// The largest absolute error of `got` against `want`, and the largest magnitude of `want`.
fn error(got: &[C32], want: impl Iterator<Item = C64>) -> (f64, f64) {
    got.iter()
        .zip(want)
        .fold((0.0f64, 0.0f64), |(err, mag), (g, w)| {
            let e = (C64::new(g.re as f64, g.im as f64) - w).norm();
            (err.max(e), mag.max(w.norm()))
        })
}

/// The callback parameters of the forward transform in iteration `i`.
fn forward_params(i: usize) -> FftParams {
    FftParams {
        load: Some(CallbackParams::load(load_scale(i))),
        store: Some(CallbackParams::store(store_scale(i))),
    }
}

/// The callback parameters of the inverse transform in iteration `i`: scale `1/N`, output
/// slot `i` of the ring.
fn inverse_params(slot: &Region) -> FftParams {
    FftParams {
        load: None,
        store: Some(CallbackParams::Store {
            scale: 1.0 / N as f32,
            output: Some(slot.clone()),
            accumulate: false,
        }),
    }
}

/// Everything both methods use.
struct Setup {
    device: Device,
    stream: Stream,
    forward: FftPlan,
    inverse: FftPlan,
    input: DeviceBuffer<[i8; 2]>,
    spectrum: DeviceBuffer<C32>,
    ring: DeviceBuffer<C32>,
    /// `ring`'s slots, made once (a `Region` is a cheap handle on the buffer).
    slots: Vec<Region>,
}

impl Setup {
    /// Zeroes the ring (so that every checked value was written by the run being checked).
    fn clear_ring(&self) -> Result<()> {
        self.stream.synchronize()?;
        self.ring.memset_bytes(0)?;
        self.device.synchronize()?;
        Ok(())
    }
}

/// The graph: forward node, then inverse node.
struct Graph {
    exec: Exec,
    forward: NodeId,
    inverse: NodeId,
}

impl Graph {
    fn new(s: &Setup) -> Result<Graph> {
        let mut dag = Dag::new();
        let forward = dag.add_fft(FftSpec {
            plan: s.forward.clone(),
            direction: Direction::Forward,
            input: (&s.input).into(),
            output: (&s.spectrum).into(),
            params: forward_params(0),
        })?;
        let inverse = dag.add_fft(FftSpec {
            plan: s.inverse.clone(),
            direction: Direction::Inverse,
            input: (&s.spectrum).into(),
            output: s.slots[0].clone(),
            params: inverse_params(&s.slots[0]),
        })?;
        dag.add_dependency(forward, inverse)?;
        let exec = dag
            .instantiate(&s.device)
            .context("instantiating the graph (two cuFFT plans with LTO callbacks)")?;
        Ok(Graph {
            exec,
            forward,
            inverse,
        })
    }

    /// Iterations `range`: two parameter updates and one launch each, then one
    /// synchronisation.
    fn run(&mut self, s: &Setup, range: std::ops::Range<usize>) -> Result<()> {
        for i in range {
            self.exec.set_fft_params(self.forward, forward_params(i))?;
            self.exec
                .set_fft_params(self.inverse, inverse_params(&s.slots[i]))?;
            self.exec.launch(&s.stream)?;
        }
        self.exec.synchronize()?;
        Ok(())
    }
}

/// The same transforms issued directly on the stream.
struct Direct {
    forward: StreamFft,
    inverse: StreamFft,
    input: Region,
    spectrum: Region,
}

impl Direct {
    fn new(s: &Setup) -> Result<Direct> {
        Ok(Direct {
            forward: StreamFft::new(&s.device, &s.forward)?,
            inverse: StreamFft::new(&s.device, &s.inverse)?,
            input: (&s.input).into(),
            spectrum: (&s.spectrum).into(),
        })
    }

    /// Iterations `range`: two `StreamFft::exec` calls each, then one synchronisation.
    fn run(&mut self, s: &Setup, range: std::ops::Range<usize>) -> Result<()> {
        for i in range {
            self.forward.exec(
                &s.stream,
                Direction::Forward,
                &self.input,
                &self.spectrum,
                &forward_params(i),
            )?;
            self.inverse.exec(
                &s.stream,
                Direction::Inverse,
                &self.spectrum,
                &s.slots[i],
                &inverse_params(&s.slots[i]),
            )?;
        }
        s.stream.synchronize()?;
        Ok(())
    }
}

/// The outcome of checking one method's results.
struct Checked {
    /// Largest per-slot error relative to the slot's largest reference magnitude.
    worst_rel: f64,
    worst_slot: usize,
    /// Largest absolute error over all slots.
    worst_abs: f64,
    /// The same for the spectrum (the last iteration's forward transform).
    spectrum_rel: f64,
    /// Slots over the tolerance.
    failed_slots: usize,
}

impl Checked {
    fn ok(&self) -> bool {
        self.failed_slots == 0 && self.spectrum_rel <= TOL
    }
}

/// Checks every ring slot and the spectrum against the references.
fn check(s: &Setup, roundtrip: &[C64], forward: &[C64]) -> Result<Checked> {
    let ring = s.ring.to_vec()?;
    let mut c = Checked {
        worst_rel: 0.0,
        worst_slot: 0,
        worst_abs: 0.0,
        spectrum_rel: 0.0,
        failed_slots: 0,
    };
    for (i, got) in ring.chunks(M).enumerate() {
        let k = factor(i);
        let (err, mag) = error(got, roundtrip.iter().map(|w| w * k));
        let rel = err / mag.max(f64::MIN_POSITIVE);
        if rel > TOL || !rel.is_finite() {
            c.failed_slots += 1;
        }
        if rel > c.worst_rel || !rel.is_finite() {
            c.worst_rel = rel;
            c.worst_slot = i;
        }
        c.worst_abs = c.worst_abs.max(err);
    }
    let k = factor(ITERS - 1);
    let (err, mag) = error(&s.spectrum.to_vec()?, forward.iter().map(|w| w * k));
    c.spectrum_rel = err / mag.max(f64::MIN_POSITIVE);
    Ok(c)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let device = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU found: {e}; this example needs one");
            return Ok(());
        }
    };
    let p = device.properties();
    println!(
        "GPU 0: {} (compute capability {}.{})",
        p.name, p.limits.compute_capability.0, p.limits.compute_capability.1
    );
    cudagraph::fft::nvjitlink_available()
        .context("the FFT callbacks are LTO callbacks, which need libnvJitLink")?;

    let x = input();
    let plan = |desc: FftPlanDesc| FftPlan::new(desc).map_err(anyhow::Error::from);
    let c2c = || FftPlanDesc::new(FftType::C2C, &[N as i64], BATCH as i64);
    let ring = DeviceBuffer::<C32>::zeros(&device, M * ITERS)?;
    let s = Setup {
        forward: plan(
            c2c()
                .with_load(LoadCallback::ComplexI8)
                .with_store(StoreCallback::Scale),
        )?,
        inverse: plan(c2c().with_store(StoreCallback::Scale))?,
        input: DeviceBuffer::from_slice(&device, &x)?,
        spectrum: DeviceBuffer::zeros(&device, M)?,
        slots: (0..ITERS)
            .map(|i| ring.region(i * M..(i + 1) * M))
            .collect(),
        ring,
        stream: Stream::new(&device)?,
        device,
    };
    println!(
        "{BATCH} x {N}-point C2C transforms; {ITERS} iterations, each: forward (load \
         ComplexI8 x a_i, store x b_i) then inverse (store x 1/{N} into ring slot i of {ITERS})"
    );

    let t0 = Instant::now();
    let mut graph = Graph::new(&s)?;
    let mut direct = Direct::new(&s)?;
    println!(
        "plans made (graph: 2 FFT nodes; stream: 2 StreamFft) in {:.2} s",
        t0.elapsed().as_secs_f64()
    );

    // References, in f64: the forward transform of the input, and the round trip.
    let x64: Vec<C64> = x
        .iter()
        .map(|v| C64::new(v[0] as f64, v[1] as f64))
        .collect();
    let forward = reference(&x64, false);
    let roundtrip: Vec<C64> = reference(&forward, true)
        .into_iter()
        .map(|c| c / N as f64)
        .collect();

    // Warm-up (the first launch uploads the graph; the first calls bind the handles).
    graph.run(&s, 0..WARMUP)?;
    direct.run(&s, 0..WARMUP)?;

    // Timed runs, the two methods alternating; the ring is cleared before each.
    let mut times: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut checks: [Option<Checked>; 2] = [None, None];
    for run in 0..RUNS {
        for m in 0..2 {
            s.clear_ring()?;
            let t0 = Instant::now();
            match m {
                0 => graph.run(&s, 0..ITERS)?,
                _ => direct.run(&s, 0..ITERS)?,
            }
            times[m].push(t0.elapsed().as_secs_f64() * 1e6 / ITERS as f64);
            if run == RUNS - 1 {
                checks[m] = Some(check(&s, &roundtrip, &forward)?);
            }
        }
    }

    println!(
        "\ncheck of every slot against rustfft (f64): max |error| <= {TOL:e} x max |reference| \
         per slot"
    );
    let names = [
        "graph  (set_fft_params x2 + Exec::launch per iteration)",
        "stream (StreamFft::exec x2 per iteration)",
    ];
    let mut all_ok = true;
    for (name, c) in names.iter().zip(&checks) {
        let c = c.as_ref().expect("checked in the last run");
        all_ok &= c.ok();
        println!(
            "  {name}: max error {:.2e} of max |reference| (slot {}), max |error| {:.2e}; \
             spectrum {:.2e}: {}",
            c.worst_rel,
            c.worst_slot,
            c.worst_abs,
            c.spectrum_rel,
            if c.ok() {
                "ok".to_string()
            } else {
                format!(
                    "FAILED ({} of {ITERS} slots over the tolerance)",
                    c.failed_slots
                )
            }
        );
    }

    let (g, d) = (median(&mut times[0]), median(&mut times[1]));
    println!(
        "\ntime per iteration (wall clock of {ITERS} iterations + one synchronisation, median \
         of {RUNS} runs):"
    );
    println!("  graph:  {g:8.2} µs");
    println!("  stream: {d:8.2} µs");
    println!("  graph / stream: {:.2}", g / d);

    if !all_ok {
        bail!("a result is wrong (see the check above)");
    }
    println!("\nall {ITERS} iterations correct for both methods");
    Ok(())
}
