//! Experiment `host`: building, validating and lowering to the `RecordingBackend`.

use anyhow::Result;

use crate::bench::Bench;
use crate::host::{self, Topology};
use crate::report::{Report, Table};

/// Host only: building, validating and lowering to the `RecordingBackend` (as
/// `benches/host.rs`), for the host-only target.
pub fn host_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let ns = b.ns.clone();
    let mut t = Table::new(
        "host-recording",
        "Host only: build, validate + lower to RecordingBackend, per node",
        "The DAG of the GPU experiments with placeholder kernel and buffer, lowered to \
         `RecordingBackend::new(DeviceLimits::hopper())`; no CUDA call.",
        &ns,
    );
    let mut rows = Vec::new();
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.key();
        rows.push((
            topology,
            t.row(&format!("{name}: build"), None),
            t.row(&format!("{name}: validate + lower"), None),
            t.row(&format!("{name}: total"), None),
        ));
    }
    let mut details = Vec::new();
    let mut worst: Option<f64> = None;
    for (topology, rb, rl, rt_) in rows {
        for (ni, &n) in ns.iter().enumerate() {
            let f = host::measure(topology, n, host::runs_for(n))?;
            t.set(rb, ni, f.build_us);
            t.set(rl, ni, f.validate_lower_us);
            t.set(rt_, ni, f.total_us);
            if n == 10_000 {
                details.push(format!("{}: {:.3} µs/node", topology.name(), f.total_us));
                worst = Some(worst.map_or(f.total_us, |w: f64| w.max(f.total_us)));
            }
        }
    }
    report.target(
        "host-only build + validate + lower (RecordingBackend, 10,000 nodes) ≤ 0.7 µs per node"
            .into(),
        if details.is_empty() {
            "N=10,000 not in CUDAGRAPH_BENCH_NS".into()
        } else {
            details.join("; ")
        },
        worst,
        host::TARGET_US_PER_NODE,
    );
    report.table(t);
    Ok(())
}
