//! A cudarc program turned into a cudagraph DAG (feature `cudarc`): the buffers stay cudarc's
//! `CudaSlice`s, the kernels are cudarc's NVRTC-compiled functions, and the loop of three
//! kernels per step becomes one graph launched 1,000 times, with a per-launch parameter (the
//! step's bias) updated on the executable graph between launches. The result is checked,
//! bit for bit, against the plain cudarc version launching the same kernels on a stream.
//!
//! Run on a machine with a GPU: `cargo run --release --features cudarc --example cudarc_interop`

use std::time::Instant;

use anyhow::{ensure, Context};
use cudagraph::cudarc::driver::{CudaContext, CudaSlice, LaunchConfig as CuConfig, PushKernelArg};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{args, Dag, Device, In, InOut, Kernel, LaunchConfig, Lend, Lent, Stream};

const SOURCE: &str = r#"
extern "C" __global__ void axpy(float* y, float a, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void shift(float* y, float bias, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += bias;
}
extern "C" __global__ void clamp(float* y, float lo, float hi, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = fminf(fmaxf(y[i], lo), hi);
}
"#;

const N: usize = 1 << 16;
const STEPS: usize = 1000;
const A: f32 = 0.001;
const LO: f32 = -4.0;
const HI: f32 = 4.0;

/// The bias of step `t`: a per-launch parameter.
fn bias(t: usize) -> f32 {
    ((t % 17) as f32 - 8.0) * 1e-3
}

fn main() -> anyhow::Result<()> {
    let ctx = CudaContext::new(0).context("no GPU (cudarc could not open device 0)")?;
    let cs = ctx.new_stream()?;
    let ptx = compile_ptx(SOURCE)?;
    // The PTX text, from which cudagraph reads the kernels' parameter layouts.
    let image = ptx
        .as_bytes()
        .context("compile_ptx gives an image")?
        .to_vec();
    let module = ctx.load_module(ptx)?;
    let (axpy, shift, clamp) = (
        module.load_function("axpy")?,
        module.load_function("shift")?,
        module.load_function("clamp")?,
    );
    let x0: Vec<f32> = (0..N).map(|i| ((i % 101) as f32 - 50.0) * 0.01).collect();
    let y0: Vec<f32> = (0..N).map(|i| ((i % 7) as f32) * 0.1).collect();
    let n = N as i32;

    // The cudarc version: three launches per step on a stream.
    let cfg = CuConfig::for_num_elems(N as u32);
    let x: CudaSlice<f32> = cs.clone_htod(&x0)?;
    let mut y: CudaSlice<f32> = cs.clone_htod(&y0)?;
    let t0 = Instant::now();
    for t in 0..STEPS {
        let b = bias(t);
        // SAFETY: the kernels' parameters are (float*, float, const float*, int),
        // (float*, float, int) and (float*, float, float, int), given buffers of `n` floats.
        unsafe {
            cs.launch_builder(&axpy)
                .arg(&mut y)
                .arg(&A)
                .arg(&x)
                .arg(&n)
                .launch(cfg)?;
            cs.launch_builder(&shift)
                .arg(&mut y)
                .arg(&b)
                .arg(&n)
                .launch(cfg)?;
            cs.launch_builder(&clamp)
                .arg(&mut y)
                .arg(&LO)
                .arg(&HI)
                .arg(&n)
                .launch(cfg)?;
        }
    }
    let want = cs.clone_dtoh(&y)?;
    let stream_time = t0.elapsed();

    // The same program as a DAG: cudarc's functions as kernels, its slices lent (they stay
    // cudarc's), one launch per step with the bias updated on the executable graph.
    let device = Device::from_cudarc(&ctx)?;
    // SAFETY: `image` is the PTX the functions' module was loaded from.
    let [axpy, shift, clamp] =
        [&axpy, &shift, &clamp].map(|f| unsafe { Kernel::from_cudarc_image(&ctx, f, &image) });
    let (axpy, shift, clamp) = (axpy?, shift?, clamp?);
    let mut xs: CudaSlice<f32> = cs.clone_htod(&x0)?;
    let mut ys: CudaSlice<f32> = cs.clone_htod(&y0)?;
    let (x, y) = (Lent::new(&xs)?, Lent::new(&ys)?);
    let cfg = LaunchConfig::for_elements(N as u32, 256);
    let mut dag = Dag::new();
    let k1 = dag.add_kernel(&axpy, cfg, &args![InOut(&y), A, In(&x), n])?;
    let k2 = dag.add_kernel(&shift, cfg, &args![InOut(&y), bias(0), n])?;
    let k3 = dag.add_kernel(&clamp, cfg, &args![InOut(&y), LO, HI, n])?;
    dag.set_name(k2, "shift");
    dag.chain(&[k1, k2, k3])?;
    let mut exec = dag.instantiate(&device)?;
    let stream = Stream::from_cudarc(&cs)?;
    let t0 = Instant::now();
    for t in 0..STEPS {
        exec.set_kernel_arg(k2, 1, bias(t))?;
        exec.launch_lent(&stream, &mut [Lend::new(&mut xs), Lend::new(&mut ys)])?;
    }
    // Read through cudarc: ordered after the launches by the write event each one recorded.
    let got = cs.clone_dtoh(&ys)?;
    let graph_time = t0.elapsed();

    ensure!(
        got == want,
        "the graph's result differs from cudarc's: y[0] = {} vs {}",
        got[0],
        want[0]
    );
    println!(
        "{STEPS} steps of 3 kernels over {N} floats: cudarc stream {:.2} ms, cudagraph DAG {:.2} ms \
         (wall time, including the final read; one run, not a benchmark)",
        stream_time.as_secs_f64() * 1e3,
        graph_time.as_secs_f64() * 1e3
    );
    println!(
        "results equal, bit for bit (y[0] = {}, y[{}] = {})",
        got[0],
        N - 1,
        got[N - 1]
    );
    Ok(())
}
