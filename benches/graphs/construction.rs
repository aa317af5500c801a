//! Experiment `construction`: build, validate + lower, instantiate, and the total, per node.

use std::time::Instant;

use anyhow::Result;
use cudagraph::result::runtime as rt;

use crate::bench::{progress, us_per_node, Bench, CAPTURE, CRATE, RAW, RAW_GENERIC};
use crate::host::{median, stages, Topology};
use crate::report::{ratio_between, ratio_summary, Report, Table};

/// Construction: build, validate + lower, instantiate, and the total, per node.
pub fn construction_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    const CAP_T: &str = "stream capture: capture + instantiate";
    const RAW_T: &str = "raw graph: build + instantiate";
    const RAW_GEN_T: &str = "raw graph, generic API: cudaGraphAddNode + instantiate";
    const LOWER: &str = "cudagraph: validate + lower";
    const CRATE_T: &str = "cudagraph: build + Dag::into_exec";
    const CRATE_T_COPY: &str = "cudagraph: build + Dag::instantiate (keeps the DAG: copies it)";
    for topology in [Topology::Chain, Topology::FAN8] {
        let name = topology.name();
        let key = topology.key();
        let mut build = Table::new(
            &format!("construction-{key}-build"),
            &format!("Construction, {name}: build (nodes added), per node"),
            "Stream capture: `cudaStreamBeginCapture` + the launches + `cudaStreamEndCapture`. \
             Raw graph: `cudaGraphCreate` + `cudaGraphAddKernelNode` per node (generic API: \
             `cudaGraphAddNode` per node instead). cudagraph: `Dag::add_kernel` + \
             `Dag::add_dependency` (host only; the CUDA graph is made when lowering).",
            &ns,
        );
        let bc = build.row(CAPTURE, None);
        let br = build.row(RAW, None);
        let bg = build.row(RAW_GENERIC, Some(RAW));
        let bk = build.row(CRATE, None);
        let mut lower = Table::new(
            &format!("construction-{key}-lower"),
            &format!("Construction, {name}: validation + lowering, per node"),
            "cudagraph: `Dag::lower` into a `CudaBackend` (validation, then one \
             `cudaGraphAddKernelNode` per node), compared with the raw graph's build (the same \
             CUDA calls).",
            &ns,
        );
        let lr = lower.row("raw graph: build (same CUDA calls)", None);
        let lg = lower.row(RAW_GENERIC, Some("raw graph: build (same CUDA calls)"));
        let lk = lower.row(LOWER, Some("raw graph: build (same CUDA calls)"));
        let mut inst = Table::new(
            &format!("construction-{key}-instantiate"),
            &format!("Construction, {name}: instantiation, per node"),
            "`cudaGraphInstantiate` of each method's graph; for cudagraph also all of \
             `Dag::into_exec` (validation + lowering + instantiation; `Dag::instantiate` also copies \
             the DAG).",
            &ns,
        );
        let ic = inst.row(CAPTURE, Some(RAW));
        let ir = inst.row(RAW, None);
        let ig = inst.row(RAW_GENERIC, Some(RAW));
        let ik = inst.row("cudagraph: cudaGraphInstantiate", Some(RAW));
        let ia = inst.row("cudagraph: Dag::into_exec (all)", None);
        let mut total = Table::new(
            &format!("construction-{key}-total"),
            &format!("Construction, {name}: from nothing to a launchable graph, per node"),
            "Build + (validation + lowering +) instantiation, timed in one go. In every table \
             of this experiment the methods run in a rotating order (each repetition starts \
             with the next one).",
            &ns,
        );
        let tc = total.row(CAP_T, Some(RAW_T));
        let tr = total.row(RAW_T, None);
        let tg = total.row(RAW_GEN_T, Some(RAW_T));
        let tk = total.row(CRATE_T, Some(RAW_T));
        let tkc = total.row(CRATE_T_COPY, Some(RAW_T));
        for (ni, &n) in ns.iter().enumerate() {
            let st = stages(topology, n);
            let reps = b.reps(n).construction;
            let mut s: Vec<Vec<f64>> = vec![Vec::new(); 15];
            // A raw graph made by `build`, then instantiated: build, instantiate and total
            // into `v[at..at + 3]`.
            let raw = |build: &dyn Fn() -> Result<crate::raw::RawGraph>,
                       v: &mut [f64; 15],
                       at: usize|
             -> Result<()> {
                let t0 = Instant::now();
                let g = build()?;
                let t1 = Instant::now();
                let e = b.instantiate_raw(&g)?;
                let t2 = Instant::now();
                drop((e, g));
                v[at] = us_per_node(t1 - t0, n);
                v[at + 1] = us_per_node(t2 - t1, n);
                v[at + 2] = us_per_node(t2 - t0, n);
                Ok(())
            };
            // One method's measurements of a repetition into `v` (the indices the medians
            // below read).
            let run = |method: usize, v: &mut [f64; 15]| -> Result<()> {
                match method {
                    0 => raw(&|| b.build_raw(topology, n, 1), v, 0)?,
                    // Raw, generic API.
                    1 => raw(&|| b.build_raw_generic(topology, n, 1), v, 12)?,
                    2 => raw(&|| b.capture(&st, 1), v, 3)?,
                    3 => {
                        // cudagraph, end to end, the DAG consumed.
                        let t0 = Instant::now();
                        let (dag, _) = b.build_dag(topology, n, 1)?;
                        let t1 = Instant::now();
                        let exec = dag.into_exec(&b.device)?;
                        let t2 = Instant::now();
                        drop(exec);
                        v[6] = us_per_node(t1 - t0, n);
                        v[7] = us_per_node(t2 - t1, n);
                        v[8] = us_per_node(t2 - t0, n);
                    }
                    4 => {
                        // cudagraph, end to end, the DAG kept (copied into the Exec).
                        let t0 = Instant::now();
                        let (dag, _) = b.build_dag(topology, n, 1)?;
                        let exec = dag.instantiate(&b.device)?;
                        let t1 = Instant::now();
                        drop((exec, dag));
                        v[11] = us_per_node(t1 - t0, n);
                    }
                    _ => {
                        // cudagraph, by phase: validate + lower, then CUDA's instantiation
                        // alone.
                        let (dag, _) = b.build_dag(topology, n, 1)?;
                        let t0 = Instant::now();
                        let mut backend = cudagraph::CudaBackend::new(&b.device)?;
                        let handles = dag.lower(&mut backend)?;
                        let t1 = Instant::now();
                        // SAFETY: the backend's graph is live and complete.
                        let e = unsafe { rt::graph_instantiate(backend.raw_graph(), 0)? };
                        let t2 = Instant::now();
                        // SAFETY: never launched.
                        unsafe { rt::graph_exec_destroy(e)? };
                        drop((handles, backend, dag));
                        v[9] = us_per_node(t1 - t0, n);
                        v[10] = us_per_node(t2 - t1, n);
                    }
                }
                Ok(())
            };
            const METHODS: usize = 6;
            for rep in 0..=reps {
                b.sync()?;
                let mut v = [0f64; 15];
                // Each repetition starts with the next method, so that none always runs first
                // (or right after another's teardown): the order's effect on CUDA's timings
                // falls on every method alike.
                for k in 0..METHODS {
                    run((rep + k) % METHODS, &mut v)?;
                }
                if rep > 0 {
                    for (k, x) in v.iter().enumerate() {
                        s[k].push(*x);
                    }
                }
            }
            let mut m = |k: usize| median(&mut s[k]);
            let (rb, ri, rt_) = (m(0), m(1), m(2));
            let (cb, ci, ct) = (m(3), m(4), m(5));
            let (kb, ka, kt) = (m(6), m(7), m(8));
            let (kl, ki) = (m(9), m(10));
            let ktc = m(11);
            let (gb, gi, gt) = (m(12), m(13), m(14));
            total.set(tkc, ni, ktc);
            build.set(bc, ni, cb);
            build.set(br, ni, rb);
            build.set(bg, ni, gb);
            build.set(bk, ni, kb);
            lower.set(lr, ni, rb);
            lower.set(lg, ni, gb);
            lower.set(lk, ni, kl);
            inst.set(ic, ni, ci);
            inst.set(ir, ni, ri);
            inst.set(ig, ni, gi);
            inst.set(ik, ni, ki);
            inst.set(ia, ni, ka);
            total.set(tc, ni, ct);
            total.set(tr, ni, rt_);
            total.set(tg, ni, gt);
            total.set(tk, ni, kt);
            progress(
                &format!("construction, {name}, N={n} ({reps} reps)"),
                t_start,
            );
        }
        let (all, _) = ratio_summary(&total, CRATE_T, &ns);
        let (at_big, worst_big) = ratio_summary(&total, CRATE_T, &[1_000, 10_000]);
        report.target(
            format!(
                "build + validate + lower + instantiate, {name}: within 15% of raw build + \
                 instantiate at N = 1,000 and 10,000"
            ),
            format!("{at_big} (all N: {all})"),
            worst_big,
            1.15,
        );
        // The split of that gap: CUDA's generic API itself, and the crate's own host work.
        let (crate_gen, _) = ratio_between(&total, CRATE_T, RAW_GEN_T, &ns);
        let (gen_raw, _) = ratio_summary(&total, RAW_GEN_T, &ns);
        let (lower_gen, _) = ratio_between(&lower, LOWER, RAW_GENERIC, &ns);
        report.info(
            format!(
                "cudagraph vs raw generic API, {name}: build + validate + lower + instantiate \
                 against raw `cudaGraphAddNode` build + instantiate (and that against raw \
                 `cudaGraphAddKernelNode`)"
            ),
            format!(
                "cudagraph / generic: {crate_gen}; generic / specific: {gen_raw}; validate + \
                 lower alone / generic build: {lower_gen}"
            ),
        );
        report.table(build);
        report.table(lower);
        report.table(inst);
        report.table(total);
    }
    Ok(())
}
