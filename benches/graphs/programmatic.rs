//! Experiment `programmatic`: the chain experiment with plain edges against programmatic
//! dependent launch edges (both ports), GPU time per node, side by side in one run (issue 31).

use std::time::Instant;

use anyhow::{bail, Context, Result};
use cudagraph::{args, CompileOptions, Dag, Exec, Kernel, Module, NodeId, ProgrammaticPort};

use crate::bench::{progress, Bench, BLOCK};
use crate::host::median;
use crate::report::{ratio_summary, Report, Table};

/// The chain's kernel: the bench's `tiny` (one block of 32 threads adding `v` to a counter),
/// with the device calls a kernel after a programmatic edge makes. `cudaGridDependencySynchronize()`
/// waits for the kernel before (whose increment it reads); the trigger lets the next kernel
/// start while this one finishes. With plain edges both return at once.
///
/// `pdl_free` is the floor: a kernel that does not wait (its atomic add needs nothing of the
/// kernel before), so a programmatic edge lets the kernels overlap entirely.
const SOURCE: &str = r#"
extern "C" __global__ void pdl_tiny(unsigned* c, unsigned v) {
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
    if (threadIdx.x == 0) c[0] += v;
}
extern "C" __global__ void pdl_free(unsigned* c, unsigned v) {
    cudaTriggerProgrammaticLaunchCompletion();
    if (threadIdx.x == 0) atomicAdd(c, v);
}
"#;

/// Node counts (the issue's chain experiment).
const NS: [usize; 3] = [10, 100, 1_000];
/// Launches between the two events of one measurement.
const LAUNCHES: usize = 20;
/// The issue's aim for programmatic edges, µs per node (plain edges: about 0.85 on the H200).
const AIM_US: f64 = 0.6;

const PLAIN: &str = "plain edges";
const PROG: &str = "programmatic port";
const COMPLETION: &str = "launch-completion port";
const FREE: &str = "programmatic port, kernels that do not wait (floor)";

/// The chains: plain edges, programmatic edges of each port (kernels that wait), and
/// programmatic edges between kernels that do not wait (`pdl_free`).
const METHODS: [(&str, Option<ProgrammaticPort>, bool); 4] = [
    (PLAIN, None, true),
    (PROG, Some(ProgrammaticPort::Programmatic), true),
    (COMPLETION, Some(ProgrammaticPort::LaunchCompletion), true),
    (FREE, Some(ProgrammaticPort::Programmatic), false),
];

/// A chain of `n` `pdl_tiny` nodes adding 1 to the bench's counter, joined by `port`.
fn chain(b: &Bench, k: &Kernel, n: usize, port: Option<ProgrammaticPort>) -> Result<Dag> {
    let mut dag = Dag::with_capacity(n, n.saturating_sub(1));
    let cfg = cudagraph::LaunchConfig::new(1, BLOCK);
    let ids: Vec<NodeId> = (0..n)
        .map(|_| dag.add_kernel(k, cfg, &args![&b.counter, 1u32]))
        .collect::<cudagraph::Result<_>>()?;
    for w in ids.windows(2) {
        match port {
            None => dag.add_dependency(w[0], w[1])?,
            Some(p) => dag.add_programmatic_dependency(w[0], w[1], p)?,
        }
    }
    Ok(dag)
}

/// GPU time per node of a chain of N kernels with plain and programmatic edges.
pub fn programmatic_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let cc = b.device.limits().compute_capability;
    if cc < (9, 0) {
        report.info(
            "programmatic edges".into(),
            format!(
                "not measured: compute capability {}.{} (needs 9.0)",
                cc.0, cc.1
            ),
        );
        return Ok(());
    }
    let source = format!("{}{SOURCE}", cudagraph::CONDITIONAL_INCLUDE);
    let compiled = cudagraph::compile(Some(&b.device), &source, &CompileOptions::default())
        .context("compiling pdl_tiny (needs the toolkit's cuda_device_runtime_api.h)")?;
    let module = Module::load(&b.device, &compiled.image, Default::default())?;
    let (waits, free) = (module.kernel("pdl_tiny")?, module.kernel("pdl_free")?);
    let mut t = Table::new(
        "programmatic-chain-gpu",
        "Chain with programmatic edges: GPU time, per node",
        &format!(
            "A chain of N one-block kernels (32 threads; each calls \
             `cudaTriggerProgrammaticLaunchCompletion()` then `cudaGridDependencySynchronize()` \
             and adds 1 to a counter) as one `Exec`, joined by plain edges or by programmatic \
             edges (`Dag::add_programmatic_dependency`) of each port. CUDA events around \
             {LAUNCHES} back-to-back launches, divided by {LAUNCHES}·N; the median of the \
             repetitions, methods interleaved. Every chain is checked to count N first. The \
             last row is the floor: kernels that do not wait (`atomicAdd`, no \
             `cudaGridDependencySynchronize()`), so programmatic edges overlap them entirely; \
             it is not a dependent chain."
        ),
        &NS,
    );
    let rows: Vec<usize> = METHODS
        .iter()
        .map(|&(l, p, _)| t.row(l, p.map(|_| PLAIN)))
        .collect();
    for (ni, &n) in NS.iter().enumerate() {
        let mut execs: Vec<Exec> = METHODS
            .iter()
            .map(|&(_, p, wait)| {
                let k = if wait { &waits } else { &free };
                Ok(chain(b, k, n, p)?.into_exec(&b.device)?)
            })
            .collect::<Result<_>>()?;
        // Warm-up (the first launch uploads the graph), and a check that each chain counts n:
        // a kernel reading the counter before the one before it wrote would lose increments.
        for (m, exec) in execs.iter_mut().enumerate() {
            for _ in 0..3 {
                b.reset_counter()?;
                exec.launch(&b.stream)?;
                let got = b.read_counter()?;
                if got != n as u32 {
                    bail!("{}: a chain of {n} increments counted {got}", METHODS[m].0);
                }
            }
        }
        let reps = b.reps(n).launch;
        let mut samples = vec![Vec::new(); METHODS.len()];
        for rep in 0..reps {
            for m in (0..METHODS.len()).map(|k| (k + rep) % METHODS.len()) {
                b.sync()?;
                b.start.record(&b.stream)?;
                for _ in 0..LAUNCHES {
                    execs[m].launch(&b.stream)?;
                }
                b.end.record(&b.stream)?;
                b.end.synchronize()?;
                let us = b.start.elapsed_ms(&b.end)? as f64 * 1e3;
                samples[m].push(us / (LAUNCHES * n) as f64);
            }
        }
        for (m, &r) in rows.iter().enumerate() {
            t.set(r, ni, median(&mut samples[m]));
        }
        b.sync()?;
        drop(execs);
        progress(&format!("programmatic chain, N={n} ({reps} reps)"), t_start);
    }
    for label in [PROG, COMPLETION, FREE] {
        let (detail, _) = ratio_summary(&t, label, &NS);
        report.info(
            format!("programmatic edges: {label} vs plain edges"),
            detail,
        );
    }
    // The aim, at the largest N (per-node cost without the launch's fixed cost).
    let ni = NS.len() - 1;
    let best = [PROG, COMPLETION]
        .iter()
        .filter_map(|l| t.rows.iter().find(|r| r.label == *l)?.values[ni])
        .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.min(v))));
    let plain = t.rows[rows[0]].values[ni];
    report.target(
        format!(
            "chain GPU time with programmatic edges < {AIM_US} µs per node (N={})",
            NS[ni]
        ),
        match (best, plain) {
            (Some(v), Some(p)) => format!("{v:.3} µs per node (plain edges {p:.3})"),
            _ => "no data".into(),
        },
        best,
        AIM_US,
    );
    report.table(t);
    Ok(())
}
