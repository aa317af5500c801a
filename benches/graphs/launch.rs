//! Experiment `launch`: CPU time to submit one run and GPU time of one run, per node.

use std::time::Instant;

use anyhow::{bail, Result};
use cudagraph::Exec;

use crate::bench::{progress, us_per_node, Bench, CAPTURE, CRATE, RAW, STREAM};
use crate::counting_alloc::count;
use crate::host::{median, stages, Topology};
use crate::raw::RawExec;
use crate::report::{ratio_summary, Report, Table};

/// Launches: CPU time to submit one run and GPU time of one run, per node.
pub fn launch_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.name();
        let mut cpu = Table::new(
            &format!("launch-{}-cpu", topology.key()),
            &format!("Launch, {name}: CPU time of the launch calls, per node"),
            "Wall time of the calls that submit one run (N `cudaLaunchKernel` plus the event \
             calls for stream launches; one `cudaGraphLaunch` / `Exec::launch` for graphs), \
             started on an idle stream.",
            &ns,
        );
        let mut gpu = Table::new(
            &format!("launch-{}-gpu", topology.key()),
            &format!("Launch, {name}: GPU time, per node"),
            "CUDA events recorded on the stream before and after one run. For stream launches \
             it includes the gaps when the host issues slower than the GPU runs.",
            &ns,
        );
        let rows: Vec<(usize, usize)> = [
            (STREAM, Some(RAW)),
            (CAPTURE, Some(RAW)),
            (RAW, None),
            (CRATE, Some(RAW)),
        ]
        .iter()
        .map(|&(l, vs)| (cpu.row(l, vs), gpu.row(l, vs)))
        .collect();
        for (ni, &n) in ns.iter().enumerate() {
            let st = stages(topology, n);
            let reps = b.reps(n).launch;
            let raw_graph = b.build_raw(topology, n, 1)?;
            let raw_exec = b.instantiate_raw(&raw_graph)?;
            let cap_graph = b.capture(&st, 1)?;
            let cap_exec = b.instantiate_raw(&cap_graph)?;
            let (dag, _) = b.build_dag(topology, n, 1)?;
            let mut exec = dag.instantiate(&b.device)?;
            // Warm-up (the first launch of a graph uploads it), and a check that every method
            // runs all N nodes (the chain serialises its increments; fan-out nodes race).
            for m in 0..4 {
                if topology == Topology::Chain {
                    b.reset_counter()?;
                }
                submit(b, m, &st, &raw_exec, &cap_exec, &mut exec)?;
                if topology == Topology::Chain {
                    let got = b.read_counter()?;
                    if got != n as u32 {
                        bail!(
                            "{}: a chain of {n} increments counted {got}",
                            cpu.rows[m].label
                        );
                    }
                }
                submit(b, m, &st, &raw_exec, &cap_exec, &mut exec)?;
            }
            b.sync()?;
            let mut cpu_s = vec![Vec::new(); 4];
            let mut gpu_s = vec![Vec::new(); 4];
            for rep in 0..reps {
                // Rotate which method goes first, so none always runs right after another.
                for m in (0..4).map(|k| (k + rep) % 4) {
                    b.sync()?;
                    b.start.record(&b.stream)?;
                    let (a, (t, submitted)) = count(|| {
                        let t0 = Instant::now();
                        let r = submit(b, m, &st, &raw_exec, &cap_exec, &mut exec);
                        (t0.elapsed(), r)
                    });
                    submitted?;
                    b.end.record(&b.stream)?;
                    b.end.synchronize()?;
                    if m == 3 {
                        b.launch_allocs.add(a, 1);
                    }
                    cpu_s[m].push(us_per_node(t, n));
                    gpu_s[m].push(b.start.elapsed_ms(&b.end)? as f64 * 1e3 / n as f64);
                }
            }
            for (m, &(rc, rg)) in rows.iter().enumerate() {
                cpu.set(rc, ni, median(&mut cpu_s[m]));
                gpu.set(rg, ni, median(&mut gpu_s[m]));
            }
            b.sync()?;
            drop(exec);
            drop((cap_exec, cap_graph, raw_exec, raw_graph));
            progress(&format!("launch, {name}, N={n} ({reps} reps)"), t_start);
        }
        for (t, what) in [(&cpu, "CPU"), (&gpu, "GPU")] {
            let (detail, worst) = ratio_summary(t, CRATE, &ns);
            report.target(
                format!("launch {what} time, {name}: cudagraph within 5% of the raw graph"),
                detail,
                worst,
                1.05,
            );
        }
        report.table(cpu);
        report.table(gpu);
    }
    Ok(())
}

/// Submits one run with method `m` (0 stream, 1 capture, 2 raw, 3 crate).
pub fn submit(
    b: &Bench,
    m: usize,
    st: &[usize],
    raw: &RawExec,
    cap: &RawExec,
    exec: &mut Exec,
) -> Result<()> {
    match m {
        0 => b.submit_stream(st, 1),
        1 => b.launch_raw(cap),
        2 => b.launch_raw(raw),
        _ => Ok(exec.launch(&b.stream)?),
    }
}
