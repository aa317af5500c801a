//! Host-only benchmark: building, validating and lowering large DAGs to the
//! [`RecordingBackend`], which needs no GPU (it runs anywhere, CI included).
//!
//! `cargo bench --bench host` prints, for a 10,000-node chain and a 10,000-node fan-out/fan-in
//! DAG of width 8 (and the same at 1,000 nodes), the median over several runs of
//!
//! - *build*: `Dag::new` plus one `add_kernel` and its `add_dependency` calls per node;
//! - *validate + lower*: `Dag::lower` to a `RecordingBackend` (it validates, then lowers),
//!
//! in µs per node, against the target of at most 0.7 µs per node for the two together (issue #9).
//!
//! The GPU benchmark (`benches/graphs/`) includes this file as a module: it reuses the DAG
//! shapes ([`Topology`], [`stages`], [`build_shape`]) and [`measure`] for its targets section.

use std::time::Instant;

use cudagraph::{args, Dag, DeviceLimits, LaunchConfig, NodeId, RecordingBackend};

/// The shape of a benchmark DAG.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// Every node waits for the one before it.
    Chain,
    /// One node, then `width` nodes that wait for it, then one node that waits for all of
    /// them, and so on: 1, w, 1, w, 1, ... (the join of one block is the fork of the next).
    FanOutIn {
        /// Nodes per parallel layer.
        width: usize,
    },
}

impl Topology {
    /// The fan-out/fan-in shape the benchmarks use (width 8).
    pub const FAN8: Topology = Topology::FanOutIn { width: 8 };

    /// Short name, for tables and file names.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Chain => "chain",
            Topology::FanOutIn { .. } => "fan-out/fan-in (width 8)",
        }
    }

    /// A name without spaces or slashes, for CSV keys.
    pub fn key(self) -> &'static str {
        match self {
            Topology::Chain => "chain",
            Topology::FanOutIn { .. } => "fan8",
        }
    }
}

/// The widths of the stages of an `n`-node DAG of this shape: every node of a stage depends
/// on every node of the stage before it. For the fan-out/fan-in shape the stages are
/// 1, w, 1, w, ..., with a shorter last stage when `n` does not fit exactly (N = 1, 10, 100,
/// 1,000 and 10,000 all end on a single node for width 8, since each is 1 more than a multiple
/// of 9).
pub fn stages(topology: Topology, n: usize) -> Vec<usize> {
    match topology {
        Topology::Chain => vec![1; n],
        Topology::FanOutIn { width } => {
            let mut out = Vec::new();
            let mut left = n;
            let mut single = true;
            while left > 0 {
                let w = if single { 1 } else { width.min(left) };
                out.push(w);
                left -= w;
                single = !single;
            }
            out
        }
    }
}

/// Builds an `n`-node DAG of `topology` by calling `add(deps)` once per node, in stage order;
/// `deps` are the handles of the previous stage. Returns the handles in creation order.
pub fn build_shape<N: Copy, E>(
    topology: Topology,
    n: usize,
    mut add: impl FnMut(&[N]) -> Result<N, E>,
) -> Result<Vec<N>, E> {
    let mut all = Vec::with_capacity(n);
    let mut prev: Vec<N> = Vec::new();
    let mut cur: Vec<N> = Vec::new();
    for w in stages(topology, n) {
        cur.clear();
        for _ in 0..w {
            cur.push(add(&prev)?);
        }
        all.extend_from_slice(&cur);
        std::mem::swap(&mut prev, &mut cur);
    }
    Ok(all)
}

/// Median of `v` (which is sorted in place); NaN for an empty slice.
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// Medians of one host-only measurement, in µs per node.
#[derive(Debug, Clone, Copy)]
pub struct HostFigures {
    /// The shape.
    pub topology: Topology,
    /// Nodes.
    pub n: usize,
    /// Runs the medians are taken over.
    pub runs: usize,
    /// `Dag::new` + `add_kernel` + `add_dependency`, per node.
    pub build_us: f64,
    /// `Dag::lower` to a `RecordingBackend` (validation and lowering), per node.
    pub validate_lower_us: f64,
    /// Build + validate + lower in the same run, per node (median of the sums).
    pub total_us: f64,
}

/// Builds an `n`-node DAG of one-block `tiny(unsigned*, unsigned)` kernel nodes, as the GPU
/// benchmark does, with placeholder kernel and buffer from `rec`.
pub fn build_recording_dag(
    rec: &mut RecordingBackend,
    topology: Topology,
    n: usize,
) -> cudagraph::Result<(Dag, Vec<NodeId>)> {
    let tiny = rec.kernel("tiny", &[8, 4]);
    let c = rec.device_buffer::<u32>(1);
    let cfg = LaunchConfig::new(1, 32);
    let mut dag = Dag::new();
    let ids = build_shape(topology, n, |deps: &[NodeId]| {
        let id = dag.add_kernel(&tiny, cfg, &args![&c, 1u32])?;
        for &d in deps {
            dag.add_dependency(d, id)?;
        }
        Ok::<_, cudagraph::Error>(id)
    })?;
    Ok((dag, ids))
}

/// Times building and validating + lowering an `n`-node DAG `runs` times (after one warm-up
/// run) and returns the medians.
pub fn measure(topology: Topology, n: usize, runs: usize) -> cudagraph::Result<HostFigures> {
    let mut rec = RecordingBackend::new(DeviceLimits::hopper());
    let (mut build, mut lower, mut total) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..=runs {
        let t0 = Instant::now();
        let (dag, ids) = build_recording_dag(&mut rec, topology, n)?;
        let t1 = Instant::now();
        let handles = dag.lower(&mut rec)?;
        let t2 = Instant::now();
        assert_eq!(handles.len(), ids.len());
        assert_eq!(rec.call_count(), n, "one recorded call per node");
        // Start every run from an empty recording (dropped outside the timed part).
        rec.clear();
        drop((dag, handles));
        if run == 0 {
            continue; // warm-up
        }
        let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / n as f64;
        build.push(per(t1 - t0));
        lower.push(per(t2 - t1));
        total.push(per(t2 - t0));
    }
    Ok(HostFigures {
        topology,
        n,
        runs,
        build_us: median(&mut build),
        validate_lower_us: median(&mut lower),
        total_us: median(&mut total),
    })
}

/// The host-only target: build + validate + lower at most this many µs per node.
pub const TARGET_US_PER_NODE: f64 = 0.7;

/// Runs of [`measure`] for `n` nodes (fewer for big DAGs, to keep the run short).
pub fn runs_for(n: usize) -> usize {
    if n >= 10_000 {
        15
    } else {
        41
    }
}

#[allow(dead_code)] // reason: unused when benches/graphs/ includes this file as a module
fn main() {
    // `CUDAGRAPH_HOST_BENCH=chain:10000:3` (or `fan8:…`): that one measurement only, printed
    // on one line (for profilers such as callgrind); `…:3:build`: the builds only.
    if let Ok(only) = std::env::var("CUDAGRAPH_HOST_BENCH") {
        let parts: Vec<&str> = only.split(':').collect();
        let topology = match parts.first() {
            Some(&"fan8") => Topology::FAN8,
            _ => Topology::Chain,
        };
        let n = parts.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        let runs = parts.get(2).and_then(|s| s.parse().ok()).unwrap_or(1);
        if parts.get(3) == Some(&"build") {
            // Building (and dropping) only: instruction counts of the build alone.
            let mut rec = RecordingBackend::new(DeviceLimits::hopper());
            for _ in 0..=runs {
                let built = build_recording_dag(&mut rec, topology, n);
                assert!(built.is_ok(), "build failed");
            }
            return;
        }
        match measure(topology, n, runs) {
            Ok(f) => println!(
                "{} N={n} runs={runs}: build {:.3} validate+lower {:.3} total {:.3} µs/node",
                topology.key(),
                f.build_us,
                f.validate_lower_us,
                f.total_us
            ),
            Err(e) => {
                eprintln!("host benchmark failed: {e}");
                std::process::exit(1);
            }
        }
        return;
    }
    println!("# cudagraph host-only benchmark: build, validate + lower to RecordingBackend\n");
    println!(
        "Tiny one-block kernel nodes (`tiny(unsigned*, unsigned)`), placeholder buffer and kernel; \
         median of several runs after a warm-up; µs per node. Target: build + validate + lower \
         ≤ {TARGET_US_PER_NODE} µs per node.\n"
    );
    println!("| DAG | N | runs | build | validate + lower | total | target |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    let mut all_met = true;
    for topology in [Topology::Chain, Topology::FAN8] {
        for n in [1_000, 10_000] {
            let f = match measure(topology, n, runs_for(n)) {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("host benchmark failed: {e}");
                    std::process::exit(1);
                }
            };
            let met = f.total_us <= TARGET_US_PER_NODE;
            all_met &= met;
            println!(
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {} |",
                topology.name(),
                n,
                f.runs,
                f.build_us,
                f.validate_lower_us,
                f.total_us,
                if met { "met" } else { "missed" }
            );
        }
    }
    println!(
        "\nTarget (≤ {TARGET_US_PER_NODE} µs per node for build + validate + lower): {}",
        if all_met { "met" } else { "missed" }
    );
}
