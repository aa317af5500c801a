//! GPU test of dependencies inferred from data access (issue 31): a DAG whose edges are
//! inferred (independent branches of slow kernels on their own buffers, joined at the end)
//! computes what the same nodes chained in program order compute, and runs clearly faster.

use anyhow::ensure;
use cudagraph::{args, Dag, DeviceBuffer, Event, In, InOut, Kernel, LaunchConfig, Out};

use crate::common::Gpu;

/// `spin_step` waits about `ns` nanoseconds (the GPU's global timer) in one thread, then
/// updates its buffer's one value: long enough that launch costs do not matter, and one block
/// so that the branches fit on the GPU side by side. `join` sums the branches' values.
pub const SOURCE: &str = r#"
__device__ unsigned long long now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
extern "C" __global__ void spin_step(float* x, float mul, long long ns) {
    unsigned long long t0 = now();
    while ((long long)(now() - t0) < ns) {}
    x[0] = x[0] * mul + 1.0f;
}
extern "C" __global__ void join4(const float* a, const float* b, const float* c,
                                 const float* d, float* out) {
    out[0] = a[0] + b[0] + c[0] + d[0];
}
"#;

/// Branches, kernels per branch, and how long each kernel spins.
const BRANCHES: usize = 4;
const STEPS: usize = 3;
const SPIN_NS: i64 = 1_000_000;

/// The DAG: `BRANCHES` branches of `STEPS` spinning kernels, each branch on its own buffer
/// (read and written: `InOut`), then a join reading every branch (`In`) and writing `out`
/// (`Out`); nodes added branch after branch, no edges.
fn nodes(
    spin: &Kernel,
    join: &Kernel,
    bufs: &[DeviceBuffer<f32>],
    out: &DeviceBuffer<f32>,
) -> anyhow::Result<Dag> {
    let mut dag = Dag::new();
    let one = LaunchConfig::new(1, 1);
    for (b, buf) in bufs.iter().enumerate() {
        for _ in 0..STEPS {
            dag.add_kernel(spin, one, &args![InOut(buf), (b + 2) as f32, SPIN_NS])?;
        }
    }
    dag.add_kernel(
        join,
        one,
        &args![
            In(&bufs[0]),
            In(&bufs[1]),
            In(&bufs[2]),
            In(&bufs[3]),
            Out(out)
        ],
    )?;
    Ok(dag)
}

/// The result the CPU expects: each branch applies `x * (b + 2) + 1` `STEPS` times to 0.
fn expected() -> f32 {
    (0..BRANCHES)
        .map(|b| (0..STEPS).fold(0.0f32, |x, _| x * (b + 2) as f32 + 1.0))
        .sum()
}

register!(gpu "infer::inferred_branches_match_the_sequential_order_and_run_faster" => inferred_branches_run_in_parallel);
/// The inferred DAG has exactly the edges the data needs (each branch a chain, every branch's
/// last kernel into the join: `BRANCHES * (STEPS - 1) + BRANCHES` edges) and no race; the
/// sequential DAG chains all nodes in program order. Both give the CPU's result after every
/// launch (buffers reset in between). Timing: CUDA events around 3 launches of each, after a
/// warm-up launch. The sequential DAG runs `BRANCHES * STEPS + 1` kernels of ~1 ms one after
/// another (~13 ms); the inferred one runs the branches side by side (~`STEPS + 1` = 4 ms):
/// a ratio near 0.31. The test asks for < 0.75, which holds even if the GPU ran only two
/// branches at a time (7/13 = 0.54) or launch costs (microseconds) were 100 times larger than
/// measured, so it fails only when the branches really are serialised.
fn inferred_branches_run_in_parallel(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let m = gpu.module(SOURCE)?;
    let (spin, join) = (m.kernel("spin_step")?, m.kernel("join4")?);
    let bufs: Vec<DeviceBuffer<f32>> = (0..BRANCHES)
        .map(|_| DeviceBuffer::<f32>::zeros(d, 1))
        .collect::<cudagraph::Result<_>>()?;
    let out = DeviceBuffer::<f32>::zeros(d, 1)?;

    let mut inferred = nodes(&spin, &join, &bufs, &out)?;
    let added = inferred.infer_dependencies();
    ensure!(
        added.len() == BRANCHES * (STEPS - 1) + BRANCHES,
        "inferred {} edges: {added:?}",
        added.len()
    );
    ensure!(inferred.races().is_empty(), "races after inference");
    let mut sequential = nodes(&spin, &join, &bufs, &out)?;
    let order = sequential.topological_order();
    sequential.chain(&order)?;

    let mut ms = Vec::new();
    for (what, dag) in [("inferred", &inferred), ("sequential", &sequential)] {
        let mut exec = dag.instantiate(d)?;
        let (start, end) = (Event::new(d)?, Event::new(d)?);
        let mut run = |timed: bool| -> anyhow::Result<f32> {
            for b in &bufs {
                b.copy_from_slice(&[0.0])?;
            }
            if timed {
                start.record(&gpu.stream)?;
            }
            exec.launch(&gpu.stream)?;
            if timed {
                end.record(&gpu.stream)?;
            }
            exec.synchronize()?;
            let got = out.to_vec()?[0];
            ensure!(
                got == expected(),
                "{what}: the join computed {got}, the CPU {}",
                expected()
            );
            Ok(if timed { start.elapsed_ms(&end)? } else { 0.0 })
        };
        run(false)?; // warm-up: the first launch uploads the graph
        let mut t = Vec::new();
        for _ in 0..3 {
            t.push(run(true)?);
        }
        t.sort_by(f32::total_cmp);
        println!("{what}: {:.2} ms per launch (median of 3)", t[1]);
        ms.push(t[1]);
    }
    let ratio = ms[0] / ms[1];
    println!(
        "inferred / sequential = {ratio:.2} (ideal {:.2})",
        (STEPS + 1) as f32 / (BRANCHES * STEPS + 1) as f32
    );
    ensure!(
        ratio < 0.75,
        "the inferred DAG took {:.2} ms, the sequential one {:.2} ms: ratio {ratio:.2}, not < 0.75",
        ms[0],
        ms[1]
    );
    Ok(())
}
