//! Newton iterations inside a WHILE conditional node: the square roots of a million values,
//! refined on the GPU until a kernel finds that every one has converged, with no host round
//! trip between iterations (one graph launch, one wait).
//!
//! ```text
//!   iters = 0 (memset) ─> x = a (init) ─> WHILE (handle, default 1) ─┐
//!                                          body: changed = 0 (memset)
//!                                                ─> x = (x + a/x)/2, count changed (step)
//!                                                ─> iters += 1; handle = changed && iters < 100 (decide)
//! ```
//!
//! A value has converged when an iteration changes it by at most 1e-6 of itself (a few `f32`
//! ulps: Newton's iteration for the square root settles within one or two ulps and may
//! alternate there). The result is checked against `f64::sqrt` with a relative tolerance of
//! 2e-6, and the loop must have ended because the values converged (fewer than 100 iterations).
//!
//! With a GPU (`cudagraph::Device::get(0)` succeeds) it compiles the kernels with NVRTC
//! (`cudagraph::CONDITIONAL_INCLUDE`: `cudaGraphSetConditional` needs the toolkit's
//! `cuda_device_runtime_api.h`), runs the graph and checks it. Without a GPU it builds the same
//! DAG against a `RecordingBackend` with H100/H200 limits, validates and lowers it, and prints
//! the CUDA calls that would be made and the DAG as DOT.
//!
//! Run with `cargo run --example newton`.

use anyhow::{ensure, Result};
use cudagraph::{
    args, Dag, Device, DeviceBuffer, DeviceLimits, Kernel, LaunchConfig, Module, RecordingBackend,
    CONDITIONAL_INCLUDE,
};

/// How many square roots.
const N: usize = 1 << 20;
/// An iteration stops counting a value as changing below this relative change.
const CONVERGED: f32 = 1e-6;
/// The most iterations the loop may run (it stops earlier when the values converged).
const MAX_ITERS: u32 = 100;
/// The check against `f64::sqrt`.
const TOLERANCE: f64 = 2e-6;

const KERNELS: &str = r#"
extern "C" __global__ void init(float* x, const float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = a[i] > 1.0f ? a[i] : 1.0f;
}
extern "C" __global__ void step(float* x, const float* a, int n, unsigned int* changed,
                                float converged) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float old = x[i];
    float next = 0.5f * (old + a[i] / old);
    x[i] = next;
    if (fabsf(next - old) > converged * next) atomicAdd(changed, 1u);
}
extern "C" __global__ void decide(cudaGraphConditionalHandle h, const unsigned int* changed,
                                  unsigned int* iters, unsigned int max_iters) {
    unsigned int k = ++*iters;
    cudaGraphSetConditional(h, (*changed != 0 && k < max_iters) ? 1u : 0u);
}
"#;

/// Parameter sizes of `init`, `step` and `decide` (pointers and the handle 8 bytes, `int`,
/// `unsigned` and `float` 4): what a recording backend needs to stand in for them.
const INIT_PARAMS: &[usize] = &[8, 8, 4];
const STEP_PARAMS: &[usize] = &[8, 8, 4, 8, 4];
const DECIDE_PARAMS: &[usize] = &[8, 8, 8, 4];

/// The values: spread over nine orders of magnitude.
fn values() -> Vec<f32> {
    (0..N)
        .map(|i| 1e-3 * 10f32.powf(9.0 * i as f32 / N as f32))
        .collect()
}

struct Buffers {
    a: DeviceBuffer<f32>,
    x: DeviceBuffer<f32>,
    changed: DeviceBuffer<u32>,
    iters: DeviceBuffer<u32>,
}

/// The graph: `iters = 0`, `x = a`, then the WHILE over the Newton step.
fn build(b: &Buffers, init: &Kernel, step: &Kernel, decide: &Kernel) -> Result<Dag> {
    let shape = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let again = dag.conditional_handle(1); // the first iteration always runs
    let mut body = Dag::new();
    let reset = body.add_memset(&b.changed, 0u32)?;
    let s = body.add_kernel(
        step,
        shape,
        &args![&b.x, &b.a, N as i32, &b.changed, CONVERGED],
    )?;
    let d = body.add_kernel(
        decide,
        LaunchConfig::new(1, 1),
        &args![&again, &b.changed, &b.iters, MAX_ITERS],
    )?;
    body.set_name(reset, "changed = 0");
    body.set_name(s, "newton step");
    body.set_name(d, "decide");
    body.chain(&[reset, s, d])?;
    let zero = dag.add_memset(&b.iters, 0u32)?;
    let start = dag.add_kernel(init, shape, &args![&b.x, &b.a, N as i32])?;
    let w = dag.add_while(&again, &body)?;
    dag.set_name(zero, "iters = 0");
    dag.set_name(start, "x = a");
    dag.set_name(w, "until converged");
    dag.chain(&[zero, start, w])?;
    Ok(dag)
}

fn main() -> Result<()> {
    match Device::get(0) {
        Ok(device) => on_gpu(&device),
        Err(e) => {
            println!("no GPU found: {e}");
            println!("Building the same DAG against a RecordingBackend (H100/H200 limits).\n");
            let mut rec = RecordingBackend::new(DeviceLimits::hopper());
            let b = Buffers {
                a: rec.device_buffer(N),
                x: rec.device_buffer(N),
                changed: rec.device_buffer(1),
                iters: rec.device_buffer(1),
            };
            let dag = build(
                &b,
                &rec.kernel("init", INIT_PARAMS),
                &rec.kernel("step", STEP_PARAMS),
                &rec.kernel("decide", DECIDE_PARAMS),
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
    let module = Module::from_source(device, &format!("{CONDITIONAL_INCLUDE}{KERNELS}"))?;
    let [init, step, decide] = ["init", "step", "decide"].map(|k| module.kernel(k));
    let (init, step, decide) = (init?, step?, decide?);
    let a = values();
    let b = Buffers {
        a: DeviceBuffer::from_slice(device, &a)?,
        x: DeviceBuffer::zeros(device, N)?,
        changed: DeviceBuffer::zeros(device, 1)?,
        iters: DeviceBuffer::zeros(device, 1)?,
    };
    let mut exec = build(&b, &init, &step, &decide)?.instantiate(device)?;
    let stream = cudagraph::Stream::new(device)?;
    let t = std::time::Instant::now();
    exec.launch(&stream)?;
    exec.synchronize()?;
    let elapsed = t.elapsed();
    let iters = b.iters.to_vec()?[0];
    let x = b.x.to_vec()?;
    let worst = a
        .iter()
        .zip(&x)
        .map(|(&a, &x)| {
            let want = f64::from(a).sqrt();
            (f64::from(x) - want).abs() / want
        })
        .fold(0.0f64, f64::max);
    println!(
        "{N} square roots: {iters} Newton iterations in one launch ({elapsed:.2?}), worst \
         relative error against f64 {worst:.2e} (tolerance {TOLERANCE:.0e})"
    );
    ensure!(
        iters < MAX_ITERS,
        "the loop stopped at its limit of {MAX_ITERS} iterations: the values did not converge"
    );
    ensure!(
        worst <= TOLERANCE,
        "worst relative error {worst:.2e} above {TOLERANCE:.0e}"
    );
    println!("ok");
    Ok(())
}
