//! Experiment `memory`: a graph that allocates, uses and frees its scratch with graph memory
//! nodes, against the same graph over a preallocated buffer: launch time (CPU and GPU) and
//! device memory (free memory, and the graph memory pool's reserved and used bytes), side by
//! side in one run (issue 28).

use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use cudagraph::{args, Dag, Device, DeviceBuffer, Exec, Kernel, LaunchConfig, Module};

use crate::bench::{progress, Bench};
use crate::host::median;
use crate::report::{Report, Table};

/// The scratch user: every element written, then one element read back into `out`, so the
/// scratch is really touched each launch.
const SOURCE: &str = r#"
extern "C" __global__ void fill(float* s, int n, float v) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        s[i] = v + (float)i;
}
extern "C" __global__ void last(const float* s, int n, float* out) {
    if (threadIdx.x == 0) out[0] = s[n - 1];
}
"#;

/// Scratch sizes, in bytes.
const SIZES: [usize; 3] = [64 << 10, 4 << 20, 64 << 20];
/// Launches between two measurements.
const LAUNCHES: usize = 200;
/// Repetitions (after one warm-up), methods interleaved.
const REPS: usize = 5;

const NODES: &str = "graph memory nodes (alloc, memset, 2 kernels, free)";
const PREALLOC: &str = "preallocated buffer (memset, 2 kernels)";

/// The graph over `scratch` (a graph allocation when `None`).
fn build(
    fill: &Kernel,
    last: &Kernel,
    n: usize,
    scratch: Option<&DeviceBuffer<f32>>,
    out: &DeviceBuffer<f32>,
) -> Result<Dag> {
    let shape = LaunchConfig::new(264, 256);
    let mut dag = Dag::new();
    match scratch {
        None => {
            let (a, s) = dag.add_alloc::<f32>(n)?;
            let z = dag.add_graph_memset(&s, 0u32)?;
            let f = dag.add_kernel(fill, shape, &args![&s, n as i32, 1.0f32])?;
            let l = dag.add_kernel(last, LaunchConfig::new(1, 32), &args![&s, n as i32, out])?;
            let free = dag.add_free(&s)?;
            dag.chain(&[a, z, f, l, free])?;
        }
        Some(s) => {
            let z = dag.add_memset(s, 0u32)?;
            let f = dag.add_kernel(fill, shape, &args![s, n as i32, 1.0f32])?;
            let l = dag.add_kernel(last, LaunchConfig::new(1, 32), &args![s, n as i32, out])?;
            dag.chain(&[z, f, l])?;
        }
    }
    Ok(dag)
}

/// The graph memory pool's attribute `attr` of `device`, bytes
/// (`cudaDeviceGetGraphMemAttribute`).
fn pool(device: &Device, attr: cudagraph::sys::cudaGraphMemAttributeType) -> Result<u64> {
    let api = cudagraph::load::cudart()?;
    let f = api
        .cudaDeviceGetGraphMemAttribute
        .as_ref()
        .map_err(|e| anyhow!("cudaDeviceGetGraphMemAttribute: {e}"))?;
    let mut v = 0u64;
    // SAFETY: the ordinal is a device of this machine; the attributes asked are all 64-bit
    // values, written to `v`.
    let status = unsafe { f(device.ordinal() as i32, attr, (&mut v as *mut u64).cast()) };
    if status != cudagraph::sys::cudaError::cudaSuccess {
        bail!("cudaDeviceGetGraphMemAttribute failed: {status:?}");
    }
    Ok(v)
}

fn mib(b: i64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// Times `LAUNCHES` back-to-back launches of `exec`: (CPU µs per launch call, GPU µs per
/// launch from events).
fn time(b: &Bench, exec: &mut Exec) -> Result<(f64, f64)> {
    b.sync()?;
    b.start.record(&b.stream)?;
    let t = Instant::now();
    for _ in 0..LAUNCHES {
        exec.launch(&b.stream)?;
    }
    let cpu = t.elapsed().as_secs_f64() * 1e6 / LAUNCHES as f64;
    b.end.record(&b.stream)?;
    b.end.synchronize()?;
    let gpu = b.start.elapsed_ms(&b.end)? as f64 * 1e3 / LAUNCHES as f64;
    Ok((cpu, gpu))
}

/// Launch times and device memory of a graph with graph memory nodes against a preallocated
/// buffer, for scratch of 64 KiB, 4 MiB and 64 MiB.
pub fn memory_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    use cudagraph::sys::cudaGraphMemAttributeType as A;
    let t_start = Instant::now();
    let module = Module::from_source(&b.device, SOURCE)?;
    let (fill, last) = (module.kernel("fill")?, module.kernel("last")?);
    let columns: Vec<String> = SIZES
        .iter()
        .map(|&s| {
            if s >= 1 << 20 {
                format!("{} MiB", s >> 20)
            } else {
                format!("{} KiB", s >> 10)
            }
        })
        .collect();
    let note = |what: &str| {
        format!(
            "One `Exec` per method and size: {NODES} against {PREALLOC} (allocated once, \
             outside the graph). {LAUNCHES} back-to-back launches; {what}; the median of \
             {REPS} repetitions, methods interleaved. Each method's last element is checked \
             after its launches."
        )
    };
    let mut cpu = Table::configs(
        "memory-nodes-cpu",
        "Graph memory nodes against a preallocated buffer: CPU time per launch",
        &note("CPU time of the launch calls (`Instant`), divided by the launches"),
        columns.clone(),
        "launch",
    );
    let mut gpu = Table::configs(
        "memory-nodes-gpu",
        "Graph memory nodes against a preallocated buffer: GPU time per launch",
        &note("CUDA events around the launches, divided by the launches"),
        columns,
        "launch",
    );
    let (cn, cp) = (cpu.row(NODES, Some(PREALLOC)), cpu.row(PREALLOC, None));
    let (gn, gp) = (gpu.row(NODES, Some(PREALLOC)), gpu.row(PREALLOC, None));
    let out = DeviceBuffer::<f32>::zeros(&b.device, 1)?;
    for (si, &bytes) in SIZES.iter().enumerate() {
        let n = bytes / 4;
        b.sync()?;
        b.device.synchronize()?;
        let free0 = b.device.memory_info()?.0 as i64;
        let pool0 = pool(&b.device, A::cudaGraphMemAttrReservedMemCurrent)? as i64;
        let mut nodes = build(&fill, &last, n, None, &out)?.into_exec(&b.device)?;
        nodes.launch(&b.stream)?;
        b.sync()?;
        let free1 = b.device.memory_info()?.0 as i64;
        let reserved = pool(&b.device, A::cudaGraphMemAttrReservedMemCurrent)? as i64;
        let used = pool(&b.device, A::cudaGraphMemAttrUsedMemCurrent)? as i64;
        let scratch = DeviceBuffer::<f32>::zeros(&b.device, n)?;
        let free2 = b.device.memory_info()?.0 as i64;
        let mut pre = build(&fill, &last, n, Some(&scratch), &out)?.into_exec(&b.device)?;
        let want = 1.0 + (n - 1) as f32;
        let mut s = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        for rep in 0..=REPS {
            for m in if rep % 2 == 0 { [0, 1] } else { [1, 0] } {
                out.memset_bytes(0)?;
                let exec = if m == 0 { &mut nodes } else { &mut pre };
                let (c, g) = time(b, exec)?;
                let got = out.to_vec()?[0];
                if got != want {
                    bail!(
                        "{}, {}: last element {got}, expected {want}",
                        [NODES, PREALLOC][m],
                        cpu.column(si)
                    );
                }
                if rep > 0 {
                    s[2 * m].push(c);
                    s[2 * m + 1].push(g);
                }
            }
        }
        cpu.set(cn, si, median(&mut s[0]));
        gpu.set(gn, si, median(&mut s[1]));
        cpu.set(cp, si, median(&mut s[2]));
        gpu.set(gp, si, median(&mut s[3]));
        b.sync()?;
        let free3 = b.device.memory_info()?.0 as i64;
        let used_after = pool(&b.device, A::cudaGraphMemAttrUsedMemCurrent)? as i64;
        let high = pool(&b.device, A::cudaGraphMemAttrReservedMemHigh)? as i64;
        report.info(
            format!("graph memory, {} scratch", cpu.column(si)),
            format!(
                "device free memory {} before; graph memory nodes: {} after instantiating and \
                 one launch ({} less), pool reserved {} (was {}), in use between launches {}; \
                 preallocated buffer: {} less for the buffer; after {} launches of each: free \
                 {} ({} below the start, the buffer included), pool in use {}, pool high-water \
                 {}",
                mib(free0),
                mib(free1),
                mib(free0 - free1),
                mib(reserved),
                mib(pool0),
                mib(used),
                mib(free1 - free2),
                (REPS + 1) * LAUNCHES,
                mib(free3),
                mib(free0 - free3),
                mib(used_after),
                mib(high),
            ),
        );
        drop((nodes, pre, scratch));
        progress(&format!("memory: {} scratch", cpu.column(si)), t_start);
    }
    report.table(cpu);
    report.table(gpu);
    Ok(())
}
