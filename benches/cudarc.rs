//! cudagraph's explicit DAG against cudarc's own ways of running the same chain of kernels
//! (feature `cudarc`; run on the GPU machine: `cargo bench --features cudarc --bench cudarc`,
//! or the staged binary).
//!
//! One cudarc function (compiled by `cudarc::nvrtc`) over one cudarc slice, N = 10, 100 and
//! 1,000 launches in a chain, three ways, side by side in one run:
//! - **stream**: cudarc's `launch_builder` on a stream, N launches per round;
//! - **capture**: the same launches captured by cudarc (`begin_capture`/`end_capture`, which
//!   instantiates) and the graph replayed with `CudaGraph::launch`;
//! - **cudagraph**: a DAG of N kernel nodes built from the same function
//!   (`Kernel::from_cudarc`) over the same slice (`Lent`), instantiated, launched with
//!   `Exec::launch_lent`;
//! - and, to show where the launch time goes, the same executable graph launched by the
//!   runtime's `cudaGraphLaunch` and the driver's `cuGraphLaunch` alone, and the same DAG over a
//!   buffer of the crate's launched with `Exec::launch`, and that graph launched with
//!   `Exec::launch_lent` and no slice to bind (`lent, 0`: the cost of its checks alone), and
//!   the first graph launched in batches by `Exec::with_lent`, the slice bound once a batch
//!   (`with_lent`); and both again on a second `CudaContext` object with cudarc's event
//!   tracking on (`tracked: lent`, `tracked: with`), where cudarc waits and records per
//!   bound slice.
//!
//! Per node: CPU µs to queue (wall time of the launching calls, in batches of at most 1,000
//! queued nodes started on an idle stream, so that no launch waits for room in the queue), GPU
//! µs (events around back-to-back launches), and for the graphs the build time (capture +
//! `end_capture`, which instantiates; adding the nodes + `Dag::into_exec`), split in two.
//! Each figure is the median of 5 trials. The slice's value is checked after every trial.
//! cudarc's event tracking is turned off on the first context object (one stream, as cudarc's
//! own capture requires: a capture may not wait on events recorded outside it), so no variant
//! but the two `tracked` rows pays for events.

use std::time::{Duration, Instant};

use anyhow::ensure;
use cudagraph::cudarc::driver::{
    sys::{CUevent_flags, CUgraphInstantiate_flags, CUstreamCaptureMode},
    CudaContext, CudaSlice, CudaStream, LaunchConfig as CuConfig, PushKernelArg,
};
use cudagraph::cudarc::nvrtc::compile_ptx;
use cudagraph::{args, Dag, Device, Exec, Kernel, KernelArg, LaunchConfig, Lend, Lent, Stream};

const SOURCE: &str = r#"extern "C" __global__ void bump(float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f;
}"#;
const LEN: usize = 256;
const TRIALS: usize = 5;
/// Batches of launches timed on the CPU per trial.
const BATCHES: usize = 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Row {
    cpu_us: f64,
    gpu_us: f64,
    build_ms: Option<f64>,
}

impl Row {
    /// A row of launch times only (no build).
    fn launch(cpu_us: f64, gpu_us: f64) -> Row {
        Row {
            cpu_us,
            gpu_us,
            build_ms: None,
        }
    }
}

/// Times `launch` (queueing `nodes` nodes per call): CPU µs per node to queue, measured in
/// batches of at most 1,000 queued nodes after the stream is idle (so the launch queue never
/// fills and the CPU never waits for the GPU), and GPU µs per node, from events around `reps`
/// back-to-back calls.
fn time(
    ctx: &std::sync::Arc<CudaContext>,
    cs: &std::sync::Arc<CudaStream>,
    reps: usize,
    nodes: usize,
    launch: &mut dyn FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<(f64, f64, usize)> {
    time_runs(ctx, cs, reps, nodes, &mut |k| {
        for _ in 0..k {
            launch()?;
        }
        Ok(())
    })
}

/// [`time`] for a `run` that makes its given number of launches in one call (`with_lent`,
/// which binds once around them).
fn time_runs(
    ctx: &std::sync::Arc<CudaContext>,
    cs: &std::sync::Arc<CudaStream>,
    reps: usize,
    nodes: usize,
    run: &mut dyn FnMut(usize) -> anyhow::Result<()>,
) -> anyhow::Result<(f64, f64, usize)> {
    let batch = (1000 / nodes).max(1);
    let mut cpu = Duration::ZERO;
    let mut calls = 0;
    for _ in 0..BATCHES {
        cs.synchronize()?;
        let t = Instant::now();
        run(batch)?;
        cpu += t.elapsed();
        calls += batch;
    }
    let e0 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    let e1 = ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    cs.synchronize()?;
    e0.record(cs)?;
    run(reps)?;
    e1.record(cs)?;
    cs.synchronize()?;
    let gpu_ms = e0.elapsed_ms(&e1)? as f64;
    Ok((
        cpu.as_secs_f64() * 1e6 / (calls * nodes) as f64,
        gpu_ms * 1e3 / (reps * nodes) as f64,
        calls + reps,
    ))
}

fn main() -> anyhow::Result<()> {
    let ctx = CudaContext::new(0)?;
    // SAFETY: one stream does all the work below, in order; no slice is used on another.
    unsafe { ctx.disable_event_tracking() };
    let cs = ctx.new_stream()?;
    let ptx = compile_ptx(SOURCE)?;
    let image = ptx.as_bytes().map(<[u8]>::to_vec).unwrap_or_default();
    let f = ctx.load_module(ptx)?.load_function("bump")?;
    let device = Device::from_cudarc(&ctx)?;
    // SAFETY: `image` is the PTX `f`'s module was loaded from.
    let kernel = unsafe { Kernel::from_cudarc_image(&ctx, &f, &image)? };
    let stream = Stream::from_cudarc(&cs)?;
    let mut x: CudaSlice<f32> = cs.alloc_zeros(LEN)?;
    let lent = Lent::new(&x)?;
    let n = LEN as i32;
    let cu_cfg = CuConfig {
        grid_dim: (1, 1, 1),
        block_dim: (LEN as u32, 1, 1),
        shared_mem_bytes: 0,
    };
    let cfg = LaunchConfig::new(1, LEN as u32);
    // A second `CudaContext` object of the same (primary) context, with cudarc's event
    // tracking on (two streams), for `launch_lent` and `with_lent` as a multi-stream cudarc
    // program pays them: cudarc's waits and record per bound slice.
    let tctx = CudaContext::new(0)?;
    let (tcs, _second) = (tctx.new_stream()?, tctx.new_stream()?);
    ensure!(
        tctx.is_managing_stream_synchronization(),
        "two streams: cudarc tracks events"
    );
    let tstream = Stream::from_cudarc(&tcs)?;
    let mut tx: CudaSlice<f32> = tcs.alloc_zeros(LEN)?;
    let tlent = Lent::new(&tx)?;
    let mut tcheck = checker(&tcs);
    let mut check = checker(&cs);

    println!("cudarc interop: a chain of N launches of one cudarc function over one cudarc slice");
    println!(
        "{:>5}  {:<13} {:>12} {:>12} {:>12}",
        "N", "how", "CPU µs/node", "GPU µs/node", "build ms"
    );
    let mut verdicts = Vec::new();
    for chain in [10usize, 100, 1000] {
        let reps = (20_000 / chain).max(20);
        let mut rows: Vec<(&str, Vec<Row>)> = vec![
            ("stream", vec![]),
            ("capture", vec![]),
            ("cudagraph", vec![]),
            ("  runtime", vec![]),
            ("  driver", vec![]),
            ("  own buf", vec![]),
            ("  lent, 0", vec![]),
            ("  with_lent", vec![]),
            ("tracked: lent", vec![]),
            ("tracked: with", vec![]),
        ];
        let (mut split, mut cap_split) = (Vec::new(), Vec::new());
        for _ in 0..TRIALS {
            // cudarc, stream launches.
            let mut round = || -> anyhow::Result<()> {
                for _ in 0..chain {
                    // SAFETY: `bump(float*, int)` over `LEN` floats.
                    unsafe { cs.launch_builder(&f).arg(&mut x).arg(&n).launch(cu_cfg)? };
                }
                Ok(())
            };
            let (cpu_us, gpu_us, calls) = time(&ctx, &cs, reps, chain, &mut round)?;
            check(&x, calls * chain, "stream")?;
            rows[0].1.push(Row::launch(cpu_us, gpu_us));

            // cudarc, stream capture and replay.
            let t = Instant::now();
            cs.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
            for _ in 0..chain {
                // SAFETY: as above.
                unsafe { cs.launch_builder(&f).arg(&mut x).arg(&n).launch(cu_cfg)? };
            }
            let captured = t.elapsed();
            let g = cs
                .end_capture(CUgraphInstantiate_flags(0))?
                .expect("a graph was captured");
            let build = t.elapsed();
            cap_split.push((ms(captured), ms(build - captured)));
            g.upload()?;
            let (cpu_us, gpu_us, calls) = time(&ctx, &cs, reps, chain, &mut || Ok(g.launch()?))?;
            check(&x, calls * chain, "capture")?;
            rows[1].1.push(Row {
                cpu_us,
                gpu_us,
                build_ms: Some(ms(build)),
            });

            // cudagraph, an explicit DAG of the same function over the same slice.
            let t = Instant::now();
            let dag = chain_dag(&kernel, cfg, chain, &args![&lent, n])?;
            let added = t.elapsed();
            let mut exec = dag.into_exec(&device)?;
            let build = t.elapsed();
            exec.upload(&stream)?;
            let (cpu_us, gpu_us, calls) = time(&ctx, &cs, reps, chain, &mut || {
                Ok(exec.launch_lent(&stream, &mut [Lend::new(&mut x)])?)
            })?;
            check(&x, calls * chain, "cudagraph")?;
            split.push((ms(added), ms(build - added)));
            rows[2].1.push(Row {
                cpu_us,
                gpu_us,
                build_ms: Some(ms(build)),
            });
            // The same graph, the slice bound once around each timed batch of launches.
            let (cpu_us, gpu_us, calls) =
                time_with_lent(&ctx, &cs, reps, chain, &mut exec, &stream, &mut x)?;
            check(&x, calls * chain, "with_lent")?;
            rows[7].1.push(Row::launch(cpu_us, gpu_us));

            // Where the launch time goes, on the same executable graph: the runtime's and the
            // driver's launch calls alone (no binding, no bookkeeping).
            let raw = exec.raw();
            let (cpu_us, gpu_us, calls) = time(&ctx, &cs, reps, chain, &mut || {
                // SAFETY: `raw` is live (held by `exec`), of the stream's device; the slice it
                // writes is alive and used on this stream only.
                unsafe { cudagraph::result::runtime::graph_launch(raw, cs.cu_stream().cast())? };
                Ok(())
            })?;
            check(&x, calls * chain, "cudaGraphLaunch")?;
            rows[3].1.push(Row::launch(cpu_us, gpu_us));
            let (cpu_us, gpu_us, calls) = time(&ctx, &cs, reps, chain, &mut || {
                // SAFETY: as above.
                let r = unsafe {
                    cudagraph::cudarc::driver::sys::cuGraphLaunch(raw.cast(), cs.cu_stream())
                };
                ensure!(
                    r == cudagraph::cudarc::driver::sys::CUresult::CUDA_SUCCESS,
                    "{r:?}"
                );
                Ok(())
            })?;
            check(&x, calls * chain, "cuGraphLaunch")?;
            rows[4].1.push(Row::launch(cpu_us, gpu_us));
            // The same DAG over a buffer of the crate's, launched with `Exec::launch`.
            let own = cudagraph::DeviceBuffer::<f32>::zeros(&device, LEN)?;
            let dag = chain_dag(&kernel, cfg, chain, &args![&own, n])?;
            let mut own_exec = dag.into_exec(&device)?;
            own_exec.upload(&stream)?;
            let (cpu_us, gpu_us, _) =
                time(
                    &ctx,
                    &cs,
                    reps,
                    chain,
                    &mut || Ok(own_exec.launch(&stream)?),
                )?;
            rows[5].1.push(Row::launch(cpu_us, gpu_us));
            // `launch_lent` with nothing to bind, on the same graph: its checks alone.
            let (cpu_us, gpu_us, _) = time(&ctx, &cs, reps, chain, &mut || {
                Ok(own_exec.launch_lent(&stream, &mut [])?)
            })?;
            rows[6].1.push(Row::launch(cpu_us, gpu_us));
            // The same DAG over the tracked context's slice: `launch_lent` (cudarc's two
            // waits and one record per launch) and `with_lent` (once per batch).
            let dag = chain_dag(&kernel, cfg, chain, &args![&tlent, n])?;
            let mut texec = dag.into_exec(&device)?;
            texec.upload(&tstream)?;
            let (cpu_us, gpu_us, calls) = time(&tctx, &tcs, reps, chain, &mut || {
                Ok(texec.launch_lent(&tstream, &mut [Lend::new(&mut tx)])?)
            })?;
            tcheck(&tx, calls * chain, "tracked launch_lent")?;
            rows[8].1.push(Row::launch(cpu_us, gpu_us));
            let (cpu_us, gpu_us, calls) =
                time_with_lent(&tctx, &tcs, reps, chain, &mut texec, &tstream, &mut tx)?;
            tcheck(&tx, calls * chain, "tracked with_lent")?;
            rows[9].1.push(Row::launch(cpu_us, gpu_us));
        }
        let med: Vec<(&str, f64, f64, Option<f64>)> = rows
            .iter()
            .map(|(how, r)| {
                (
                    *how,
                    median(r.iter().map(|r| r.cpu_us).collect()),
                    median(r.iter().map(|r| r.gpu_us).collect()),
                    r[0].build_ms
                        .map(|_| median(r.iter().filter_map(|r| r.build_ms).collect())),
                )
            })
            .collect();
        for (how, cpu, gpu, build) in &med {
            let build = build.map_or("-".to_string(), |b| format!("{b:.3}"));
            println!("{chain:>5}  {how:<13} {cpu:>12.3} {gpu:>12.3} {build:>12}");
        }
        let m = |v: &[(f64, f64)], i: usize| {
            median(v.iter().map(|p| if i == 0 { p.0 } else { p.1 }).collect())
        };
        println!(
            "{chain:>5}  build split: capture {:.3} + end_capture/instantiate {:.3} ms; DAG nodes {:.3} + into_exec {:.3} ms",
            m(&cap_split, 0), m(&cap_split, 1), m(&split, 0), m(&split, 1)
        );
        let (cap, ours) = (&med[1], &med[2]);
        let launch_ratio = ours.1 / cap.1;
        let build_ratio = ours.3.unwrap() / cap.3.unwrap();
        verdicts.push(format!(
            "N = {chain}: launch CPU cudagraph/capture {launch_ratio:.2} ({}), build cudagraph/capture {build_ratio:.2} ({})",
            if launch_ratio <= 1.0 { "met: at least as fast" } else { "MISSED: slower to launch" },
            if build_ratio <= 1.1 { "met: at most 1.1×" } else { "MISSED: above 1.1×" },
        ));
    }
    println!("targets (issue 29): cudagraph launches at least as fast as cudarc's captured graph, and builds in at most 1.1× its time");
    for v in verdicts {
        println!("  {v}");
    }
    Ok(())
}

/// [`time_runs`] of `exec` launched by `Exec::with_lent` with `x` bound, once a batch.
fn time_with_lent(
    ctx: &std::sync::Arc<CudaContext>,
    cs: &std::sync::Arc<CudaStream>,
    reps: usize,
    nodes: usize,
    exec: &mut Exec,
    stream: &Stream,
    x: &mut CudaSlice<f32>,
) -> anyhow::Result<(f64, f64, usize)> {
    time_runs(ctx, cs, reps, nodes, &mut |k| {
        Ok(exec.with_lent(stream, &mut [Lend::new(x)], |l| {
            (0..k).try_for_each(|_| l.launch())
        })?)
    })
}

/// A check of a slice read on `stream` against the launches made so far: each adds 1 to
/// every element.
fn checker(
    stream: &std::sync::Arc<CudaStream>,
) -> impl FnMut(&CudaSlice<f32>, usize, &str) -> anyhow::Result<()> + '_ {
    let mut expected = 0.0f64;
    move |x, added, what| {
        expected += added as f64;
        let v = stream.clone_dtoh(x)?;
        ensure!(
            v.iter().all(|&e| e as f64 == expected),
            "{what}: x = {} after the launches, expected {expected}",
            v[0]
        );
        Ok(())
    }
}

/// A DAG of `chain` launches of `kernel` with `args`, each after the one before.
fn chain_dag(
    kernel: &Kernel,
    cfg: LaunchConfig,
    chain: usize,
    args: &[KernelArg],
) -> cudagraph::Result<Dag> {
    let mut dag = Dag::new();
    let mut prev = None;
    for _ in 0..chain {
        let k = dag.add_kernel(kernel, cfg, args)?;
        if let Some(p) = prev {
            dag.add_dependency(p, k)?;
        }
        prev = Some(k);
    }
    Ok(dag)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
