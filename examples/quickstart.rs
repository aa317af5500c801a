//! Quickstart: build a CUDA graph as an explicit DAG, inspect it, launch it many times with a
//! parameter updated before each launch, check the result, and compare with plain stream
//! launches.
//!
//! The DAG:
//!
//! ```text
//!                      ┌─> scale   (a = x * s) ─┐
//!   upload x (H2D) ────┼─> offset  (b = x + 1) ─┼─> combine (acc += a + b + c) ─> count runs (host) ─> download acc (D2H)
//!                      └─> square  (c = x * x) ─┘
//! ```
//!
//! With a GPU (`cudagraph::Device::get(0)` succeeds) it runs the graph 100 times, changing the
//! scale factor `s` before each launch, and checks the downloaded accumulator against the same
//! 100 iterations computed on the CPU. Every value involved is an integer below 2^24, so the
//! comparison is exact (tolerance 0). Then it times the graph against the same work done with
//! plain stream launches, and shows what the host node costs.
//!
//! Without a GPU it builds the same DAG against a [`RecordingBackend`] with H100/H200 limits,
//! validates and lowers it, and prints the CUDA calls that would be made. Either way it writes
//! the DAG as Graphviz DOT to `target/quickstart.dot` and, when `dot` is installed, renders
//! `target/quickstart.svg`.
//!
//! Run with `cargo run --example quickstart` (add `--release` for meaningful timings).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use cudagraph::{
    args, dst, src, Dag, Device, DeviceBuffer, DeviceLimits, Exec, HostBuffer, Kernel,
    LaunchConfig, Module, NodeId, NodeName, RecordingBackend, Stream,
};

/// Elements per buffer: small, so the timing shows launch overhead rather than bandwidth.
const N: usize = 16 * 1024;
/// Graph launches per run.
const LAUNCHES: u32 = 100;
/// Timed runs of `LAUNCHES` iterations per measurement (the median is reported).
const REPEATS: usize = 5;
/// The kernel argument index of `scale`'s factor `s` (see [`KERNELS`]).
const SCALE_ARG: usize = 2;

const KERNELS: &str = r#"
extern "C" __global__ void scale(float* out, const float* x, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * s;
}
extern "C" __global__ void offset(float* out, const float* x, float d, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] + d;
}
extern "C" __global__ void square(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] * x[i];
}
extern "C" __global__ void combine(float* acc, const float* a, const float* b, const float* c,
                                   int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) acc[i] += a[i] + b[i] + c[i];
}
"#;

/// Parameter sizes in bytes of each kernel above (pointers 8, `float` and `int` 4): what a
/// recording backend needs to stand in for the compiled kernels. On a GPU they are checked
/// against the layout CUDA reports.
const SCALE_PARAMS: &[usize] = &[8, 8, 4, 4];
const OFFSET_PARAMS: &[usize] = &[8, 8, 4, 4];
const SQUARE_PARAMS: &[usize] = &[8, 8, 4];
const COMBINE_PARAMS: &[usize] = &[8, 8, 8, 8, 4];

/// The input: small integers, so every product and sum below is exact in `f32`.
fn input() -> Vec<f32> {
    (0..N).map(|i| (i % 64) as f32).collect()
}

/// The scale factor used by launch `k`.
fn scale_for(k: u32) -> f32 {
    1.0 + k as f32
}

/// Where the DAG's kernels and buffers come from: a real GPU, or a recording backend's
/// placeholders (same types, no memory or code behind them).
trait Provider {
    fn kernel(&mut self, name: &str, param_sizes: &[usize]) -> Result<Kernel>;
    fn device_buffer(&mut self, len: usize) -> Result<DeviceBuffer<f32>>;
    fn host_buffer(&mut self, contents: &[f32]) -> Result<HostBuffer<f32>>;
}

struct Gpu {
    device: Device,
    module: Module,
}

impl Provider for Gpu {
    fn kernel(&mut self, name: &str, param_sizes: &[usize]) -> Result<Kernel> {
        let k = self.module.kernel(name)?;
        let sizes: Vec<usize> = k.params().iter().map(|p| p.size).collect();
        ensure!(
            sizes == param_sizes,
            "kernel `{name}` has parameter sizes {sizes:?}, the example expects {param_sizes:?}"
        );
        Ok(k)
    }
    fn device_buffer(&mut self, len: usize) -> Result<DeviceBuffer<f32>> {
        Ok(DeviceBuffer::zeros(&self.device, len)?)
    }
    fn host_buffer(&mut self, contents: &[f32]) -> Result<HostBuffer<f32>> {
        Ok(HostBuffer::from_slice(&self.device, contents)?)
    }
}

impl Provider for RecordingBackend {
    fn kernel(&mut self, name: &str, param_sizes: &[usize]) -> Result<Kernel> {
        Ok(RecordingBackend::kernel(self, name, param_sizes))
    }
    fn device_buffer(&mut self, len: usize) -> Result<DeviceBuffer<f32>> {
        Ok(RecordingBackend::device_buffer(self, len))
    }
    fn host_buffer(&mut self, contents: &[f32]) -> Result<HostBuffer<f32>> {
        // A placeholder has no memory to fill: only its size matters.
        Ok(RecordingBackend::host_buffer(self, contents.len()))
    }
}

/// Everything the DAG refers to.
struct Resources {
    scale: Kernel,
    offset: Kernel,
    square: Kernel,
    combine: Kernel,
    /// Pinned input and output.
    h_in: HostBuffer<f32>,
    h_out: HostBuffer<f32>,
    /// Device copy of the input, the three fan-out results, and the accumulator.
    x: DeviceBuffer<f32>,
    a: DeviceBuffer<f32>,
    b: DeviceBuffer<f32>,
    c: DeviceBuffer<f32>,
    acc: DeviceBuffer<f32>,
}

impl Resources {
    fn new(p: &mut impl Provider) -> Result<Self> {
        Ok(Resources {
            scale: p.kernel("scale", SCALE_PARAMS)?,
            offset: p.kernel("offset", OFFSET_PARAMS)?,
            square: p.kernel("square", SQUARE_PARAMS)?,
            combine: p.kernel("combine", COMBINE_PARAMS)?,
            h_in: p.host_buffer(&input())?,
            h_out: p.host_buffer(&vec![0.0; N])?,
            x: p.device_buffer(N)?,
            a: p.device_buffer(N)?,
            b: p.device_buffer(N)?,
            c: p.device_buffer(N)?,
            acc: p.device_buffer(N)?,
        })
    }
}

fn launch_config() -> LaunchConfig {
    LaunchConfig::for_elements(N as u32, 256)
}

/// Builds the DAG (the same one with or without a GPU). Returns it and the `scale` node, whose
/// factor is updated before each launch. With `runs: None` the host node is left out (only
/// for the timing breakdown).
fn build_dag(r: &Resources, runs: Option<Arc<AtomicU32>>) -> Result<(Dag, NodeId)> {
    let cfg = launch_config();
    let n = N as i32;
    let mut dag = Dag::new();

    let upload = dag.add_copy(dst(&r.x), src(&r.h_in))?;
    let scale = dag.add_kernel(&r.scale, cfg, &args![&r.a, &r.x, scale_for(0), n])?;
    let offset = dag.add_kernel(&r.offset, cfg, &args![&r.b, &r.x, 1.0f32, n])?;
    let square = dag.add_kernel(&r.square, cfg, &args![&r.c, &r.x, n])?;
    let combine = dag.add_kernel(&r.combine, cfg, &args![&r.acc, &r.a, &r.b, &r.c, n])?;
    let count = runs.map(|runs| {
        dag.add_host(move || {
            runs.fetch_add(1, Ordering::Relaxed);
        })
    });
    let download = dag.add_copy(dst(&r.h_out), src(&r.acc))?;

    dag.set_name(upload, "upload x");
    dag.set_name(scale, "scale: a = x * s");
    dag.set_name(offset, "offset: b = x + 1");
    dag.set_name(square, "square: c = x * x");
    dag.set_name(combine, "combine: acc += a + b + c");
    dag.set_name(download, "download acc");

    dag.fan_out(upload, &[scale, offset, square])?;
    dag.fan_in(&[scale, offset, square], combine)?;
    match count {
        Some(count) => {
            dag.set_name(count, "count runs");
            dag.chain(&[combine, count, download])?;
        }
        None => dag.add_dependency(combine, download)?,
    }
    Ok((dag, scale))
}

fn print_shape(dag: &Dag) -> Result<()> {
    println!(
        "DAG: {} nodes, {} dependencies",
        dag.node_count(),
        dag.edge_count()
    );
    for id in dag.topological_order() {
        let node = dag.node(id)?;
        let mut deps: Vec<NodeId> = dag.dependencies(id).collect();
        deps.sort(); // in the order they were added
        let deps: Vec<NodeName> = deps
            .into_iter()
            .map(|d| dag.node(d).map(|n| n.name()))
            .collect::<cudagraph::Result<_>>()?;
        println!(
            "  {:<8} {:<28} after {:?}",
            node.kind().as_str(),
            node.name(),
            deps
        );
    }
    Ok(())
}

/// Writes `target/quickstart.dot` and, if Graphviz is installed, `target/quickstart.svg`.
fn write_dot(dag: &Dag) -> Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let dot_path = dir.join("quickstart.dot");
    std::fs::write(&dot_path, dag.to_dot())
        .with_context(|| format!("writing {}", dot_path.display()))?;
    println!("wrote {}", dot_path.display());

    let svg_path: PathBuf = dir.join("quickstart.svg");
    match Command::new("dot")
        .arg("-Tsvg")
        .arg(&dot_path)
        .arg("-o")
        .arg(&svg_path)
        .output()
    {
        Ok(out) if out.status.success() => println!("wrote {}", svg_path.display()),
        Ok(out) => println!(
            "`dot -Tsvg` failed ({}): {}; no SVG written",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("`dot` (Graphviz) is not installed; no SVG written")
        }
        Err(e) => println!("could not run `dot`: {e}; no SVG written"),
    }
    Ok(())
}

/// The accumulator after `launches` iterations with factors `scale_for(0..launches)`, computed
/// on the CPU exactly as the kernels do.
fn expected(launches: u32) -> Vec<f32> {
    let mut acc = vec![0.0f32; N];
    for k in 0..launches {
        let s = scale_for(k);
        for (acc, &x) in acc.iter_mut().zip(&input()) {
            *acc += x * s + (x + 1.0) + x * x;
        }
    }
    acc
}

fn check_output(what: &str, got: &[f32], want: &[f32]) -> Result<()> {
    ensure!(got.len() == want.len(), "{what}: {} values", got.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        anyhow::bail!(
            "{what}: element {i} is {}, the CPU computed {} (expected exactly equal)",
            got[i],
            want[i]
        );
    }
    Ok(())
}

/// Zeroes the accumulator between runs (the device is idle then).
fn reset(device: &Device, acc: &DeviceBuffer<f32>) -> Result<()> {
    acc.memset_bytes(0)?;
    device.synchronize()?;
    Ok(())
}

/// Runs `f` once to warm up, then `REPEATS` times; returns the median of what it measured.
fn median_time(mut f: impl FnMut() -> Result<Duration>) -> Result<Duration> {
    f()?;
    let mut times = (0..REPEATS).map(|_| f()).collect::<Result<Vec<_>>>()?;
    times.sort();
    Ok(times[REPEATS / 2])
}

fn per_launch(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6 / LAUNCHES as f64
}

fn main() -> Result<()> {
    match Device::get(0) {
        Ok(device) => run_on_gpu(device),
        Err(e) => without_gpu(&e),
    }
}

fn without_gpu(reason: &cudagraph::Error) -> Result<()> {
    println!("no GPU found: {reason}");
    println!(
        "Nothing will be executed. Building the same DAG against a RecordingBackend with \
         H100/H200 (compute capability 9.0) limits instead.\n"
    );
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let r = Resources::new(&mut rec)?;
    let (dag, _scale) = build_dag(&r, Some(Arc::new(AtomicU32::new(0))))?;
    print_shape(&dag)?;
    dag.lower(&mut rec)?;
    println!("\nThe DAG validates for the device; the CUDA calls that would build the graph:");
    print!("{}", rec.transcript());
    println!();
    write_dot(&dag)?;
    println!("\nno GPU: validated and lowered only; nothing was launched");
    Ok(())
}

fn run_on_gpu(device: Device) -> Result<()> {
    let props = device.properties();
    println!(
        "GPU 0: {} ({} SMs, compute capability {}.{}), CUDA runtime {}, driver supports {}",
        props.name,
        props.multiprocessor_count,
        props.limits.compute_capability.0,
        props.limits.compute_capability.1,
        props.runtime_version,
        props.driver_version
    );
    let module = Module::from_source(&device, KERNELS).context("compiling the kernels")?;
    let mut gpu = Gpu {
        device: device.clone(),
        module,
    };
    let r = Resources::new(&mut gpu)?;
    let runs = Arc::new(AtomicU32::new(0));
    let (dag, scale) = build_dag(&r, Some(runs.clone()))?;
    print_shape(&dag)?;
    write_dot(&dag)?;

    let stream = Stream::new(&device)?;
    let mut exec = dag.instantiate(&device)?;
    let want = expected(LAUNCHES);

    // 1. Correctness: 100 launches, a new scale factor before each.
    for k in 0..LAUNCHES {
        exec.set_kernel_arg(scale, SCALE_ARG, scale_for(k))?;
        exec.launch(&stream)?;
    }
    exec.synchronize()?;
    check_output("graph, 100 launches", &r.h_out.to_vec()?, &want)?;
    let host_runs = runs.load(Ordering::Relaxed);
    ensure!(
        host_runs == LAUNCHES,
        "the host node ran {host_runs} times, expected {LAUNCHES}"
    );
    println!(
        "\ncheck: {LAUNCHES} launches with s = {}..={}: the output equals the CPU's exactly; \
         the host node ran {host_runs} times",
        scale_for(0),
        scale_for(LAUNCHES - 1)
    );

    // 2. Timing. Each measurement is 100 iterations from a zeroed accumulator, checked
    // against the CPU afterwards; after one warm-up, the median of REPEATS is reported.
    //
    // 2a. The graph: a set_kernel_arg and a launch per iteration. For the breakdown, the same
    // DAG without its host node too.
    let time_graph = |exec: &mut Exec, what: &str| -> Result<Duration> {
        reset(&device, &r.acc)?;
        let t = Instant::now();
        for k in 0..LAUNCHES {
            exec.set_kernel_arg(scale, SCALE_ARG, scale_for(k))?;
            exec.launch(&stream)?;
        }
        exec.synchronize()?;
        let elapsed = t.elapsed();
        check_output(what, &r.h_out.to_vec()?, &want)?;
        Ok(elapsed)
    };
    let graph_time = median_time(|| time_graph(&mut exec, "graph, timed run"))?;
    let (no_host_dag, no_host_scale) = build_dag(&r, None)?;
    ensure!(
        no_host_scale == scale,
        "the scale node has the same id in both DAGs"
    );
    let mut no_host = no_host_dag.instantiate(&device)?;
    let no_host_time = median_time(|| time_graph(&mut no_host, "graph without the host node"))?;

    // 2b. The same work as plain stream launches, in the same order on one stream.
    let cfg = launch_config();
    let n = N as i32;
    let enqueue = |s: f32| -> Result<()> {
        r.x.copy_from_host_async(&r.h_in, &stream)?;
        r.scale.launch(&stream, cfg, &args![&r.a, &r.x, s, n])?;
        r.offset
            .launch(&stream, cfg, &args![&r.b, &r.x, 1.0f32, n])?;
        r.square.launch(&stream, cfg, &args![&r.c, &r.x, n])?;
        r.combine
            .launch(&stream, cfg, &args![&r.acc, &r.a, &r.b, &r.c, n])?;
        Ok(())
    };
    // Full replication. The crate has no asynchronous device-to-host copy, so each iteration
    // waits for the stream and then downloads with a blocking copy.
    let mut host_out = vec![0.0f32; N];
    let stream_full = median_time(|| {
        reset(&device, &r.acc)?;
        let mut stream_runs = 0;
        let t = Instant::now();
        for k in 0..LAUNCHES {
            enqueue(scale_for(k))?;
            stream.synchronize()?;
            stream_runs += 1; // the host node's work
            r.acc.copy_to_slice(&mut host_out)?;
        }
        let elapsed = t.elapsed();
        check_output("stream launches", &host_out, &want)?;
        ensure!(
            stream_runs == LAUNCHES,
            "stream loop ran {stream_runs} times"
        );
        Ok(elapsed)
    })?;
    // A lower bound for stream launches: only the uploads and kernels, one wait and one
    // download at the very end.
    let stream_async = median_time(|| {
        reset(&device, &r.acc)?;
        let t = Instant::now();
        for k in 0..LAUNCHES {
            enqueue(scale_for(k))?;
        }
        stream.synchronize()?;
        let elapsed = t.elapsed();
        check_output("stream launches (download at end)", &r.acc.to_vec()?, &want)?;
        Ok(elapsed)
    })?;

    let (g, h, f, a) = (
        per_launch(graph_time),
        per_launch(no_host_time),
        per_launch(stream_full),
        per_launch(stream_async),
    );
    println!(
        "\nper iteration: wall clock over {LAUNCHES} iterations, median of {REPEATS} runs after a \
         warm-up"
    );
    println!("  graph launch + set_kernel_arg, the whole DAG above:           {g:8.2} µs");
    println!("  stream launches, same work (a wait + blocking D2H each time): {f:8.2} µs");
    println!(
        "  ratio stream / graph: {:.2} ({})",
        f / g,
        if f > g {
            "the graph is faster"
        } else {
            "the graph is slower"
        }
    );
    println!("breakdown:");
    println!("  graph without the host node:                                  {h:8.2} µs");
    println!("  stream launches, H2D + 4 kernels only, one wait at the end:   {a:8.2} µs");
    println!(
        "  (the host node makes the GPU wait for a CPU callback on every launch; here that \
         adds {:.1} µs)",
        g - h
    );
    if cfg!(debug_assertions) {
        println!("  (a debug build: run with --release for representative host-side timings)");
    }

    println!(
        "\nOK: {} nodes instantiated on {}; {LAUNCHES} launches with per-launch updates \
         matched the CPU exactly; host node ran {LAUNCHES} times; DOT in target/quickstart.dot",
        dag.node_count(),
        props.name
    );
    Ok(())
}
