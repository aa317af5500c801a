//! Soak: one graph launched 10⁷ times with updates between launches, device memory and host
//! RSS printed from start to end (issue 26's soak; `CUDAGRAPH_SOAK_LAUNCHES` changes the count).
//!
//! The graph: `axpy` (y = a·x + y, `a` updated before every launch with
//! `Exec::set_kernel_arg`), a copy of `y` into pinned memory, a memset of a scratch buffer and
//! a `tally` kernel that counts on the device, enabled for one launch in 1,000
//! (`Exec::set_enabled` twice). Every 10⁵ launches a whole-graph update (`Exec::update`) swaps
//! in the other of two DAGs (the same shape over different buffers).
//!
//! Host nodes are soaked in a second graph on the same stream, launched once every 100
//! launches: a host node that counts, whose closure a whole-graph update replaces every 10 of
//! its launches (the old closure kept alive until the launches queued with it have run). It is
//! not in the first graph because a host node makes every launch wait for the host (about
//! 50 µs a launch instead of a few), which would make 10⁷ launches take most of a device call.
//!
//! At each tenth of the run it synchronises, checks the results against the host's arithmetic
//! (the sum of the `a`s so far; the host nodes' and the tally's counts) and prints device
//! memory in use (`cudaMemGetInfo`) and the process's RSS.
//!
//! Fails (exit 1) when a result is wrong, or when from the first checkpoint (after a warm-up)
//! to the last device memory in use grew at all or RSS grew by more than 4 MiB. Without a GPU
//! it prints `no GPU: <reason>` and exits 0 (1 when `CUDAGRAPH_REQUIRE_GPU=1`).
//!
//! Run on the GPU machine: `.gpu/benches/soak`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Result};
use cudagraph::{
    args, dst, src, Dag, Device, DeviceBuffer, Exec, HostBuffer, Kernel, LaunchConfig, Module,
    NodeId, Stream,
};

const N: usize = 4096;
const WHOLE_UPDATE_EVERY: u64 = 100_000;
const TALLY_EVERY: u64 = 1_000;
/// The host-node graph is launched once every this many launches of the first graph…
const HOST_EVERY: u64 = 100;
/// …and its closure replaced by a whole-graph update every this many of its own launches.
const HOST_SWAP_EVERY: u64 = 10;

const KERNELS: &str = r#"
extern "C" __global__ void axpy(float* y, float a, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void tally(unsigned long long* n) { *n += 1; }
"#;

/// One of the two DAGs the run swaps between: its buffers and nodes.
struct Side {
    y: DeviceBuffer<f32>,
    scratch: DeviceBuffer<u32>,
    dag: Dag,
    axpy: NodeId,
    tally: NodeId,
}

fn side(
    tally_kernel: &Kernel,
    tallies: &DeviceBuffer<u64>,
    axpy: &Kernel,
    x: &DeviceBuffer<f32>,
    out: &HostBuffer<f32>,
    d: &Device,
) -> Result<Side> {
    let y = DeviceBuffer::<f32>::zeros(d, N)?;
    let scratch = DeviceBuffer::<u32>::zeros(d, N)?;
    let mut dag = Dag::new();
    let k = dag.add_kernel(
        axpy,
        LaunchConfig::for_elements(N as u32, 256),
        &args![&y, 0.0f32, x, N as i32],
    )?;
    let copy = dag.add_copy(dst(out), src(&y))?;
    let memset = dag.add_memset(&scratch, 7u32)?;
    let tally = dag.add_kernel(tally_kernel, LaunchConfig::new(1, 1), &args![tallies])?;
    dag.chain(&[k, copy, memset, tally])?;
    Ok(Side {
        y,
        scratch,
        dag,
        axpy: k,
        tally,
    })
}

/// Device memory in use (all processes) and this process's RSS, bytes.
fn memory(d: &Device) -> Result<(u64, u64)> {
    let (free, total) = d.memory_info()?;
    let status = std::fs::read_to_string("/proc/self/status")?;
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Ok(((total - free) as u64, rss_kib * 1024))
}

fn run(d: &Device, launches: u64) -> Result<()> {
    let stream = Stream::new(d)?;
    let module = Module::from_source(d, KERNELS)?;
    let (axpy, tally) = (module.kernel("axpy")?, module.kernel("tally")?);
    let tallies = DeviceBuffer::<u64>::zeros(d, 1)?;
    let x = DeviceBuffer::from_slice(d, &(0..N).map(|i| (i % 7) as f32).collect::<Vec<_>>())?;
    let out = HostBuffer::<f32>::zeros(d, N)?;
    let sides = [
        side(&tally, &tallies, &axpy, &x, &out, d)?,
        side(&tally, &tallies, &axpy, &x, &out, d)?,
    ];
    let mut exec: Exec = sides[0].dag.instantiate(d)?;
    exec.set_enabled(sides[0].tally, false)?;
    // The host-node graph: two DAGs of one host node, each closure counting in its own counter.
    let counts = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let host_dags = counts.each_ref().map(|c| {
        let c = c.clone();
        let mut dag = Dag::new();
        dag.add_host(move || {
            c.fetch_add(1, Ordering::Relaxed);
        });
        dag
    });
    let mut host_exec: Exec = host_dags[0].instantiate(d)?;
    let mut host_current = 0usize;
    let mut host_launches = [0u64; 2];
    // The sum of the `a`s each side's `y` has had added, as the host adds them (exact: small
    // integers in f32 and f64).
    let mut sums = [0f64; 2];
    let mut current = 0usize;
    let mut tally_runs = 0u64;
    let warmup = (launches / 100).clamp(1, 10_000);
    let checkpoints: Vec<u64> = std::iter::once(warmup)
        .chain((1..=10).map(|k| launches * k / 10))
        .collect();
    let mut samples: Vec<(u64, f64, u64, u64)> = Vec::new();
    println!(
        "{:>12} {:>9} {:>20} {:>14}",
        "launches", "seconds", "device in use MiB", "host RSS MiB"
    );
    let t0 = Instant::now();
    let mut next = 0usize;
    for i in 1..=launches {
        if i % WHOLE_UPDATE_EVERY == 0 {
            current ^= 1;
            exec.update(&sides[current].dag)?;
            exec.set_enabled(sides[current].tally, false)?;
        }
        let s = &sides[current];
        let a = (i % 5) as f32 - 2.0; // −2 … 2
        exec.set_kernel_arg(s.axpy, 1, a)?;
        let tally_on = i % TALLY_EVERY == 0;
        if tally_on {
            exec.set_enabled(s.tally, true)?;
        }
        exec.launch(&stream)?;
        if i % HOST_EVERY == 0 {
            let n = i / HOST_EVERY;
            if n.is_multiple_of(HOST_SWAP_EVERY) {
                host_current ^= 1;
                host_exec.update(&host_dags[host_current])?;
            }
            host_exec.launch(&stream)?;
            host_launches[host_current] += 1;
        }
        if tally_on {
            exec.set_enabled(s.tally, false)?;
            tally_runs += 1;
        }
        sums[current] += a as f64;
        if next < checkpoints.len() && i == checkpoints[next] {
            next += 1;
            stream.synchronize()?; // both graphs were launched on it
                                   // A side not launched yet still holds its zeros (the first whole-graph update
                                   // comes at launch WHOLE_UPDATE_EVERY).
            let launched = if i >= WHOLE_UPDATE_EVERY { 2 } else { 1 };
            for (k, side) in sides.iter().enumerate().take(launched) {
                let y = side.y.to_vec()?;
                let bad = (0..N).find(|&j| y[j] as f64 != sums[k] * (j % 7) as f64);
                ensure!(
                    bad.is_none(),
                    "launch {i}: side {k}'s y[{}] = {} ≠ {}",
                    bad.unwrap_or(0),
                    y[bad.unwrap_or(0)],
                    sums[k] * (bad.unwrap_or(0) % 7) as f64
                );
                ensure!(
                    side.scratch.to_vec()?.iter().all(|&v| v == 7),
                    "launch {i}: the memset's buffer changed"
                );
            }
            let host = out.to_vec()?;
            ensure!(
                host[6] as f64 == sums[current] * 6.0,
                "launch {i}: the copy's output {} ≠ {}",
                host[6],
                sums[current] * 6.0
            );
            for (k, count) in counts.iter().enumerate() {
                let ran = count.load(Ordering::Relaxed);
                ensure!(
                    ran == host_launches[k],
                    "launch {i}: host closure {k} ran {ran} times, not {} (launched with it)",
                    host_launches[k]
                );
            }
            let tallied = tallies.to_vec()?[0];
            ensure!(
                tallied == tally_runs,
                "launch {i}: the tally kernel ran {tallied} times, not {tally_runs} (enabled for those)"
            );
            let (dev, rss) = memory(d)?;
            let t = t0.elapsed().as_secs_f64();
            println!(
                "{i:>12} {t:>9.1} {:>20.2} {:>14.2}",
                dev as f64 / 1048576.0,
                rss as f64 / 1048576.0
            );
            samples.push((i, t, dev, rss));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    println!("soak: {launches} launches in {secs:.1} s ({:.2} µs a launch, with one kernel-argument update each), {} whole-graph updates, the tally kernel enabled for {tally_runs}; the host-node graph launched {} times with {} closure-replacing updates", secs * 1e6 / launches as f64, launches / WHOLE_UPDATE_EVERY, launches / HOST_EVERY, launches / HOST_EVERY / HOST_SWAP_EVERY);
    let (first, last) = (samples[0], samples[samples.len() - 1]);
    let (ddev, drss) = (
        last.2 as i64 - first.2 as i64,
        last.3 as i64 - first.3 as i64,
    );
    println!("soak: from launch {} to launch {}: device memory in use {ddev:+} bytes, host RSS {drss:+} bytes", first.0, last.0);
    ensure!(ddev <= 0, "device memory in use grew by {ddev} bytes");
    ensure!(drss <= 4 << 20, "host RSS grew by {drss} bytes");
    Ok(())
}

fn main() -> Result<()> {
    let device = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU: {e}");
            if std::env::var("CUDAGRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                anyhow::bail!("CUDAGRAPH_REQUIRE_GPU=1 but the GPU cannot be used");
            }
            return Ok(());
        }
    };
    let launches = std::env::var("CUDAGRAPH_SOAK_LAUNCHES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000u64);
    run(&device, launches.max(10))
}
