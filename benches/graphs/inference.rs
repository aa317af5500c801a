//! Experiment `inference`: dependency inference on a 10,000-node DAG against the lowering time
//! (lower + instantiate on the GPU) of the same DAG (issue 31: inference at most 20% of it).

use std::time::Instant;

use anyhow::{Context, Result};
use cudagraph::{args, CompileOptions, Dag, DeviceBuffer, In, Kernel, LaunchConfig, Module, Out};

use crate::bench::{progress, Bench};
use crate::host::median;
use crate::report::{column_ratios, Report, Table};

/// Nodes in the DAG.
const NODES: usize = 10_000;
/// Buffers the kernels read and write: realistic spreads, and the worst case (every node on
/// one buffer).
const BUFFERS: [usize; 3] = [1_000, 100, 1];
/// Repetitions of each measurement (the median is reported).
const REPS: usize = 5;
/// The issue's limit: inference at most this share of lowering.
const LIMIT: f64 = 0.2;

/// Never launched: a kernel of the right shape (two buffer parameters) to instantiate.
const SOURCE: &str = r#"
extern "C" __global__ void copy1(const unsigned* a, unsigned* b) { b[0] = a[0]; }
"#;

const INFER: &str = "infer_dependencies";
const LOWER: &str = "lower + instantiate";

/// The DAG: `NODES` kernels, node `i` reading buffer `7i mod B` (`In`) and writing buffer
/// `13i + 1 mod B` (`Out`); no explicit edges.
fn dag(k: &Kernel, bufs: &[DeviceBuffer<u32>]) -> Result<Dag> {
    let b = bufs.len();
    let mut dag = Dag::with_capacity(NODES, 4 * NODES);
    let cfg = LaunchConfig::new(1, 32);
    for i in 0..NODES {
        let (r, w) = (&bufs[(i * 7) % b], &bufs[(i * 13 + 1) % b]);
        dag.add_kernel(k, cfg, &args![In(r), Out(w)])?;
    }
    Ok(dag)
}

/// Inference time against lowering time, per node, for each spread of buffers.
pub fn inference_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let compiled = cudagraph::compile(Some(&b.device), SOURCE, &CompileOptions::default())
        .context("compiling copy1")?;
    let module = Module::load(&b.device, &compiled.image, Default::default())?;
    let k = module.kernel("copy1")?;
    let columns: Vec<String> = BUFFERS
        .iter()
        .map(|n| {
            format!(
                "{NODES} nodes / {n} buffer{}",
                if *n == 1 { "" } else { "s" }
            )
        })
        .collect();
    let mut t = Table::configs(
        "inference-10k",
        "Dependency inference vs lowering, 10,000 kernel nodes, per node",
        "Host wall time of `Dag::infer_dependencies` on a DAG of 10,000 kernel nodes (each \
         reading one buffer and writing one, marked `In`/`Out`, no explicit edges), against \
         the wall time of `Dag::instantiate` of the DAG with the inferred edges (validate, \
         lower through `cudaGraphAddKernelNode`, `cudaGraphInstantiate`); median of the \
         repetitions. One column per number of buffers the nodes share (1: every node reads \
         and writes the same buffer, a chain).",
        columns,
        "node",
    );
    let (ri, rl) = (t.row(INFER, Some(LOWER)), t.row(LOWER, None));
    let mut edges = Vec::new();
    for (ci, &nb) in BUFFERS.iter().enumerate() {
        let bufs: Vec<DeviceBuffer<u32>> = (0..nb)
            .map(|_| DeviceBuffer::<u32>::zeros(&b.device, 1))
            .collect::<cudagraph::Result<_>>()?;
        let plain = dag(&k, &bufs)?;
        let (mut inf, mut low) = (Vec::new(), Vec::new());
        for _ in 0..REPS {
            let mut d = plain.clone();
            let t0 = Instant::now();
            let added = d.infer_dependencies();
            inf.push(t0.elapsed().as_secs_f64() * 1e6 / NODES as f64);
            if edges.len() == ci {
                edges.push(added.len());
            }
            let t0 = Instant::now();
            let exec = d.instantiate(&b.device)?;
            low.push(t0.elapsed().as_secs_f64() * 1e6 / NODES as f64);
            drop(exec);
        }
        t.set(ri, ci, median(&mut inf));
        t.set(rl, ci, median(&mut low));
        progress(&format!("inference, {nb} buffers ({REPS} reps)"), t_start);
    }
    report.info(
        "inference: edges inferred".into(),
        BUFFERS
            .iter()
            .zip(&edges)
            .map(|(nb, e)| format!("{e} ({nb} buffers)"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    let (detail, worst) = column_ratios(&t, INFER, LOWER);
    report.target(
        format!(
            "dependency inference ≤ {:.0}% of lower + instantiate (10,000 nodes)",
            LIMIT * 100.0
        ),
        detail,
        worst,
        LIMIT,
    );
    report.table(t);
    Ok(())
}
