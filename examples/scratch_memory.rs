//! Per-launch scratch memory with graph memory nodes: a two-pass smoothing whose intermediate
//! array and running sum live only while a launch needs them, allocated and freed by the graph
//! itself (`Dag::add_alloc`, `Dag::add_free`) from CUDA's graph memory pool.
//!
//! ```text
//!   alloc tmp ─> pass 1: tmp = smooth(x) ─────────────┐
//!   alloc sum ─> sum = 0 (memset) ─> pass 2: y = smooth(tmp), sum += y ─> free tmp
//!                                     ─> y /= sum (normalise) ─> free sum
//! ```
//!
//! The graph buffers are names, not memory: lowering writes the addresses CUDA gives the
//! allocations into the kernels' arguments and the memset; validation checks that every node
//! using one is ordered between its allocation and its free. Launched 1,000 times, the graph
//! takes its memory from the pool once: the device's free memory is printed before and after.
//! The result is checked against the same computation on the CPU.
//!
//! With a GPU (`cudagraph::Device::get(0)` succeeds) it compiles the kernels with NVRTC, runs
//! the graph and checks it. Without a GPU it builds the same DAG against a `RecordingBackend`
//! with H100/H200 limits, validates and lowers it, and prints the CUDA calls that would be
//! made (the allocations' addresses in the kernels' arguments) and the DAG as DOT.
//!
//! Run with `cargo run --example scratch_memory`.

use anyhow::{ensure, Result};
use cudagraph::{
    args, Dag, Device, DeviceBuffer, DeviceLimits, Kernel, LaunchConfig, Module, RecordingBackend,
};

/// Elements.
const N: usize = 1 << 20;
/// Launches of the graph.
const LAUNCHES: usize = 1000;
/// The check against the CPU, relative. Both sides sum in f64 (the GPU with atomics, in
/// another order: a relative difference near 1e-16), so what remains is the f32 rounding of the
/// smoothing (a few ulps, ~1e-7). A float sum of the 2^20 terms differed by 9e-4 on an H100.
const TOLERANCE: f32 = 1e-5;

const KERNELS: &str = r#"
// out[i] = mean of in[i-1], in[i], in[i+1] (clamped at the ends); sum += out[i] when sum != 0
extern "C" __global__ void smooth(float* out, const float* in, int n, double* sum) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float l = in[i > 0 ? i - 1 : 0], c = in[i], r = in[i + 1 < n ? i + 1 : n - 1];
    float v = (l + c + r) * (1.0f / 3.0f);
    out[i] = v;
    if (sum) atomicAdd(sum, (double)v);
}
extern "C" __global__ void normalise(float* y, const double* sum, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = (float)((double)y[i] / *sum);
}
"#;

/// Parameter sizes of `smooth` and `normalise` (pointers 8 bytes, `int` 4): what a recording
/// backend needs to stand in for them.
const SMOOTH_PARAMS: &[usize] = &[8, 8, 4, 8];
const NORMALISE_PARAMS: &[usize] = &[8, 8, 4];

fn input() -> Vec<f32> {
    (0..N).map(|i| 1.0 + ((i * 37) % 101) as f32).collect()
}

/// The same on the CPU.
fn reference(x: &[f32]) -> Vec<f32> {
    let smooth = |v: &[f32]| -> Vec<f32> {
        let n = v.len();
        (0..n)
            .map(|i| (v[i.saturating_sub(1)] + v[i] + v[(i + 1).min(n - 1)]) / 3.0)
            .collect()
    };
    let y = smooth(&smooth(x));
    let sum: f64 = y.iter().map(|&v| f64::from(v)).sum();
    y.iter().map(|&v| (f64::from(v) / sum) as f32).collect()
}

/// The graph: x -> tmp -> y, the sum of y, y normalised; tmp and sum are the graph's.
fn build(
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
    smooth: &Kernel,
    normalise: &Kernel,
) -> Result<Dag> {
    let shape = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let (alloc_tmp, tmp) = dag.add_alloc::<f32>(N)?;
    let (alloc_sum, sum) = dag.add_alloc::<f64>(1)?;
    let zero = dag.add_graph_memset(&sum, 0u32)?;
    // Pass 1 writes no sum: a null pointer.
    let pass1 = dag.add_kernel(smooth, shape, &args![&tmp, x, N as i32, 0u64])?;
    let pass2 = dag.add_kernel(smooth, shape, &args![y, &tmp, N as i32, &sum])?;
    let norm = dag.add_kernel(normalise, shape, &args![y, &sum, N as i32])?;
    let free_tmp = dag.add_free(&tmp)?;
    let free_sum = dag.add_free(&sum)?;
    for (id, name) in [
        (alloc_tmp, "alloc tmp"),
        (alloc_sum, "alloc sum"),
        (zero, "sum = 0"),
        (pass1, "pass 1"),
        (pass2, "pass 2 + sum"),
        (norm, "normalise"),
        (free_tmp, "free tmp"),
        (free_sum, "free sum"),
    ] {
        dag.set_name(id, name);
    }
    dag.chain(&[alloc_tmp, pass1, pass2, free_tmp])?;
    dag.chain(&[alloc_sum, zero, pass2, norm, free_sum])?;
    Ok(dag)
}

fn main() -> Result<()> {
    match Device::get(0) {
        Ok(device) => on_gpu(&device),
        Err(e) => {
            println!("no GPU found: {e}");
            println!("Building the same DAG against a RecordingBackend (H100/H200 limits).\n");
            let mut rec = RecordingBackend::new(DeviceLimits::hopper());
            let (x, y) = (rec.device_buffer(N), rec.device_buffer(N));
            let dag = build(
                &x,
                &y,
                &rec.kernel("smooth", SMOOTH_PARAMS),
                &rec.kernel("normalise", NORMALISE_PARAMS),
            )?;
            dag.lower(&mut rec)?;
            println!(
                "The CUDA calls that would build the graph:\n{}",
                rec.transcript()
            );
            println!("{}", dag.to_dot());
            println!("no GPU: validated and lowered only; nothing was launched");
            Ok(())
        }
    }
}

fn on_gpu(device: &Device) -> Result<()> {
    let module = Module::from_source(device, KERNELS)?;
    let (smooth, normalise) = (module.kernel("smooth")?, module.kernel("normalise")?);
    let xs = input();
    let x = DeviceBuffer::from_slice(device, &xs)?;
    let y = DeviceBuffer::<f32>::zeros(device, N)?;
    let mut exec = build(&x, &y, &smooth, &normalise)?.instantiate(device)?;
    let stream = cudagraph::Stream::new(device)?;
    exec.launch(&stream)?;
    exec.synchronize()?;
    let (before, _) = device.memory_info()?;
    let t = std::time::Instant::now();
    for _ in 0..LAUNCHES {
        exec.launch(&stream)?;
    }
    exec.synchronize()?;
    let elapsed = t.elapsed();
    let (after, _) = device.memory_info()?;
    println!(
        "{LAUNCHES} launches in {elapsed:.2?}, each allocating and freeing {} bytes of scratch: \
         device free memory {before} bytes before, {after} after",
        (N + 1) * 4
    );
    ensure!(
        before.saturating_sub(after) < N * 4,
        "free memory fell by {} bytes",
        before - after
    );
    let got = y.to_vec()?;
    let want = reference(&xs);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs() / w.abs())
        .fold(0.0f32, f32::max);
    println!("worst relative error against the CPU {worst:.2e} (tolerance {TOLERANCE:.0e})");
    ensure!(worst <= TOLERANCE, "worst relative error {worst:.2e}");
    println!("ok");
    Ok(())
}
