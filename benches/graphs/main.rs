//! GPU benchmark: the crate's `Dag` → `Exec` against the ways CUDA users run the same work.
//!
//! Run it on a machine with a GPU: `cargo bench --bench graphs` (or the staged binary,
//! `.gpu/benches/graphs`, from the repository root). Without a usable GPU it prints
//! `no GPU: <reason>` and exits 0 (1 when `CUDAGRAPH_REQUIRE_GPU=1`).
//!
//! Every experiment runs each method side by side in the same process and run, interleaving
//! the repetitions of the methods, and reports the median. The methods:
//!
//! 1. **stream launches**: `cudaLaunchKernel` per node (fan-out/fan-in through 8 worker streams
//!    and events), no graph;
//! 2. **stream capture**: the same stream work captured (`cudaStreamBeginCapture` /
//!    `cudaStreamEndCapture`), then `cudaGraphInstantiate` and `cudaGraphLaunch`;
//! 3. **raw graph**: an explicit graph built with the raw runtime calls of the crate's `sys`
//!    layer (function pointers fetched once): `cudaGraphCreate`, `cudaGraphAddKernelNode`,
//!    `cudaGraphInstantiate`, `cudaGraphLaunch`, `cudaGraphExecKernelNodeSetParams`,
//!    `cudaGraphExecUpdate` (for kernel nodes the crate makes the same calls): the floor for any
//!    wrapper; the construction and update experiments also make it through CUDA's generic
//!    node API (`cudaGraphAddNode`, `cudaGraphExecNodeSetParams`), which shows what the
//!    kernel-specific calls save;
//! 4. **cudagraph**: the crate's `Dag` built node by node, then `Dag::into_exec` (or `Dag::instantiate`, which keeps the DAG) → `Exec`.
//!
//! Every node is the same tiny kernel, `tiny(unsigned* c, unsigned v)`, one block of 32
//! threads, for N = 1, 10, 100, 1,000 and 10,000 nodes, as a chain and as fan-out/fan-in of
//! width 8 (stages of 1, 8, 1, 8, ..., 1 nodes). GPU time comes from CUDA events, CPU time from
//! `std::time::Instant`.
//!
//! The **FFT experiment** (`fft`) runs batched C2C transforms of complex 8-bit input (256 and
//! 4,096 points, batch 1, 16, 256 and 1,024) six ways: the crate's FFT node in a graph in each
//! form — fused (`Fusion::Fused`: plan with the `ComplexI8` LTO load callback), the same with
//! `Exec::set_fft_params` before every launch, unfused (`Fusion::Unfused`: the node's
//! conversion kernel node, then a plan without the load callback) and auto (`Fusion::Auto`,
//! the default: the form the crate measured as faster for the shape, printed per
//! configuration; `CUDAGRAPH_FFT_FUSION` forces one) — the fused plan called on a stream
//! (`StreamFft`), and unfused on a stream (an NVRTC kernel converting int8 to complex float,
//! then a callback-free plan through `StreamFft`). Each plan and graph is made once per
//! configuration; GPU time comes from CUDA events around 200 back-to-back iterations, CPU
//! time from the calls that queue them. Before timing, every method's output (but the update
//! method's) of every configuration is checked against rustfft (f64).
//! Its tables have one column per (points × batch) configuration, in µs per iteration.
//!
//! Output: one Markdown table per measurement on stdout, and `graphs.csv`, `graphs.md` and
//! `graphs.svg` (time per node against N, or per iteration against the configuration; one
//! panel per table) in `$CUDAGRAPH_BENCH_OUT`
//! (default `bench-results/` under the current directory). A "targets" section at the end
//! compares the measured ratios with the project's targets.
//!
//! The **programmatic experiment** (`programmatic`) is the chain experiment (N = 10, 100,
//! 1,000 one-block kernels) with plain edges against programmatic dependent launch edges of
//! each port (`Dag::add_programmatic_dependency`), GPU time per node from events around 20
//! back-to-back launches. The **inference experiment** (`inference`) times
//! `Dag::infer_dependencies` on 10,000 kernel nodes (over 1,000, 100 and 1 buffers) against
//! `Dag::instantiate` of the same DAG (the limit: at most 20%).
//!
//! The **WHILE experiment** (`while`, `while_loop.rs`) runs a loop whose body is 1 or 10
//! one-block kernels, 100 or 1,000 iterations, as a WHILE conditional node (one launch) and as
//! the host loop it replaces (launch the body graph, copy a flag to pinned memory, wait, read
//! it): wall µs per iteration. The **memory experiment** (`memory`, `graph_memory.rs`) times a
//! graph that allocates, fills, uses and frees its scratch (64 KiB, 4 MiB, 64 MiB) with graph
//! memory nodes against the same graph over a preallocated buffer (CPU and GPU µs per launch,
//! 200 back-to-back launches) and reports device free memory and the graph memory pool's
//! reserved and used bytes (`cudaDeviceGetGraphMemAttribute`).
//!
//! Knobs (environment): `CUDAGRAPH_BENCH_NS` (comma-separated N values, default
//! `1,10,100,1000,10000`), `CUDAGRAPH_BENCH_REPS_SCALE` (multiplies the repetition counts,
//! default 1), `CUDAGRAPH_BENCH_ONLY` (comma-separated experiment names, default all:
//! `launch,construction,update,host,fft,while,memory,programmatic,inference`).
//!
//! Files: one per experiment (`launch.rs`, `construction.rs`, `update.rs` with its
//! whole-graph part in `whole.rs`, `host_only.rs`, `fft.rs`); `bench.rs` (the shared context:
//! device, streams, the tiny kernel, the four methods, timing helpers), `raw.rs` (the raw
//! runtime calls), `report.rs` (tables, targets, CSV, Markdown) and `plot.rs` (the SVG). The
//! allocation counter is the one of `tests/no_alloc.rs` (`tests/support/counting_alloc.rs`).
//!
//! Adding an experiment: write a module with a function
//! `fn(&mut Bench, &mut Report) -> Result<()>` that measures, adds
//! [`Table`](report::Table)s with [`Report::table`](report::Report::table) and, if it has
//! targets, [`Report::target`](report::Report::target); then list it in [`experiments`].
//! Tables are printed, written to CSV/Markdown and plotted without further work. Columns are
//! node counts N ([`Table::new`](report::Table::new)) or named configurations
//! ([`Table::configs`](report::Table::configs); the CSV's `n` field then holds the column's
//! name, e.g. `4096×16`).

#[path = "../../tests/support/counting_alloc.rs"]
mod counting_alloc;
#[path = "../host.rs"]
#[allow(dead_code)] // reason: host.rs is also a bench of its own; its `main` is unused here
mod host;

mod bench;
mod construction;
mod fft;
mod graph_memory;
mod host_only;
mod inference;
mod launch;
mod plot;
mod programmatic;
mod raw;
mod report;
mod update;
mod while_loop;
mod whole;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use cudagraph::Device;

use bench::{progress, Bench};
use report::Report;

// ---- experiments ---------------------------------------------------------------------------

/// One experiment: it measures, then adds its tables (and targets) to the report.
struct Experiment {
    name: &'static str,
    run: fn(&mut Bench, &mut Report) -> Result<()>,
}

/// Every experiment, in the order they run.
fn experiments() -> Vec<Experiment> {
    vec![
        Experiment {
            name: "launch",
            run: launch::launch_experiment,
        },
        Experiment {
            name: "construction",
            run: construction::construction_experiment,
        },
        Experiment {
            name: "update",
            run: update::update_experiment,
        },
        Experiment {
            name: "host",
            run: host_only::host_experiment,
        },
        Experiment {
            name: "fft",
            run: fft::fft_experiment,
        },
        Experiment {
            name: "while",
            run: while_loop::while_experiment,
        },
        Experiment {
            name: "memory",
            run: graph_memory::memory_experiment,
        },
        Experiment {
            name: "programmatic",
            run: programmatic::programmatic_experiment,
        },
        Experiment {
            name: "inference",
            run: inference::inference_experiment,
        },
    ]
}

/// The current UTC date and time, `YYYY-MM-DD hh:mm:ss UTC`.
fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn env_list(name: &str) -> Option<Vec<String>> {
    std::env::var(name).ok().map(|v| {
        v.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

fn main() {
    let device = match Device::get(0) {
        Ok(d) => d,
        Err(e) => {
            println!("no GPU: {e}");
            if std::env::var("CUDAGRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1") {
                eprintln!("CUDAGRAPH_REQUIRE_GPU=1 but the GPU cannot be used");
                std::process::exit(1);
            }
            return;
        }
    };
    if let Err(e) = run(device) {
        eprintln!("benchmark failed: {e:#}");
        std::process::exit(1);
    }
}

fn run(device: Device) -> Result<()> {
    let ns: Vec<usize> = match env_list("CUDAGRAPH_BENCH_NS") {
        Some(v) => v
            .iter()
            .map(|s| {
                s.parse::<usize>()
                    .map_err(|e| anyhow!("CUDAGRAPH_BENCH_NS: {s}: {e}"))
            })
            .collect::<Result<_>>()?,
        None => vec![1, 10, 100, 1_000, 10_000],
    };
    if ns.is_empty() || ns.contains(&0) {
        bail!("CUDAGRAPH_BENCH_NS needs positive node counts");
    }
    let reps_scale: f64 = match std::env::var("CUDAGRAPH_BENCH_REPS_SCALE") {
        Ok(s) => s
            .parse()
            .map_err(|e| anyhow!("CUDAGRAPH_BENCH_REPS_SCALE: {s}: {e}"))?,
        Err(_) => 1.0,
    };
    let only = env_list("CUDAGRAPH_BENCH_ONLY");
    let out = std::env::var_os("CUDAGRAPH_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("bench-results"));

    let p = device.properties();
    let nvrtc = cudagraph::nvrtc_version()
        .map(|(a, b)| format!("{a}.{b}"))
        .unwrap_or_else(|e| format!("unknown ({e})"));
    let header = vec![
        format!("date: {}", utc_now()),
        format!(
            "GPU: {} (compute capability {}.{}, {} SMs, {:.1} GiB)",
            p.name,
            p.limits.compute_capability.0,
            p.limits.compute_capability.1,
            p.multiprocessor_count,
            p.total_memory as f64 / (1u64 << 30) as f64
        ),
        format!(
            "CUDA runtime {}, driver supports CUDA {}, NVRTC {nvrtc}",
            p.runtime_version, p.driver_version
        ),
        format!(
            "cudagraph {}, N = {:?}, repetitions scaled by {reps_scale}",
            env!("CARGO_PKG_VERSION"),
            ns
        ),
    ];
    println!("# cudagraph GPU benchmark\n");
    for h in &header {
        println!("- {h}");
    }
    println!();

    let mut bench = Bench::new(device, ns, reps_scale)?;
    let mut report = Report {
        header,
        tables: Vec::new(),
        targets: Vec::new(),
        errors: Vec::new(),
    };
    let t0 = Instant::now();
    for e in experiments() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|x| x == e.name))
        {
            continue;
        }
        progress(&format!("experiment `{}`", e.name), t0);
        if let Err(err) = (e.run)(&mut bench, &mut report) {
            let msg = format!("experiment `{}` failed: {err:#}", e.name);
            eprintln!("{msg}");
            report.errors.push(msg);
            // Leave the GPU idle and the streams out of capture for the next experiment.
            let _ = bench.device.synchronize();
        }
    }
    bench.sync()?;
    drop(bench);

    println!("{}", report.targets_markdown());
    report.write(&out)?;
    plot::plot(&report, &out.join("graphs.svg"))?;
    println!(
        "Wrote {0}/graphs.csv, {0}/graphs.md and {0}/graphs.svg ({1:.0} s).",
        out.display(),
        t0.elapsed().as_secs_f64()
    );
    if report.find("launch-chain-cpu").is_none() && !report.errors.is_empty() {
        bail!("no launch results");
    }
    if !report.errors.is_empty() {
        bail!("{} experiment(s) failed", report.errors.len());
    }
    Ok(())
}
