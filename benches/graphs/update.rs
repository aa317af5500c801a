//! Experiment `update`: one kernel argument of every node between launches (`update-per-node`,
//! `update-and-launch`), and whole-graph updates against re-instantiation (`whole.rs`).

use std::time::Instant;

use anyhow::{bail, Result};
use cudagraph::args;

use crate::bench::{progress, us_per_node, AllocCount, Bench, RAW, STREAM};
use crate::counting_alloc::count;
use crate::host::{median, stages, Topology};
use crate::raw::{ck, ck_drv, RawArgs};
use crate::report::{ratio_between, ratio_summary, Report, Table};
use crate::whole::{Graphs, WholeGraph};

/// Updates: one kernel argument of every node between launches, and whole-graph updates.
pub fn update_experiment(b: &mut Bench, report: &mut Report) -> Result<()> {
    let t_start = Instant::now();
    let ns = b.ns.clone();
    let topology = Topology::Chain;
    const RAW_SET: &str = "raw graph: cudaGraphExecKernelNodeSetParams";
    const RAW_GEN_SET: &str = "raw graph, generic API: cudaGraphExecNodeSetParams";
    const RAW_DRV_SET: &str = "raw graph, driver API: cuGraphExecKernelNodeSetParams";
    const ARG: &str = "cudagraph: Exec::set_kernel_arg";
    const ARGS: &str = "cudagraph: Exec::set_kernel_args";
    let mut per = Table::new(
        "update-per-node",
        "Update one argument of every node (chain), CPU time per update, no launch",
        "N calls, one per node, changing argument `v`. Raw: the filled-in \
         `cudaKernelNodeParams` with its argument value rewritten, then \
         `cudaGraphExecKernelNodeSetParams` (the runtime's call); \
         generic API: the filled-in kernel node's `cudaGraphNodeParams` the same way, then \
         `cudaGraphExecNodeSetParams`; driver API: the driver's `CUDA_KERNEL_NODE_PARAMS` \
         (kernel and primary context) the same way, then `cuGraphExecKernelNodeSetParams` \
         (the call the crate makes for kernel nodes). cudagraph: typed, checked updates. \
         The five run in a rotating order (each repetition starts with the next one).",
        &ns,
    );
    let pr = per.row(RAW_SET, None);
    let pg = per.row(RAW_GEN_SET, Some(RAW_SET));
    let pd = per.row(RAW_DRV_SET, Some(RAW_SET));
    let pa = per.row(ARG, Some(RAW_SET));
    let pas = per.row(ARGS, Some(RAW_SET));
    let mut upl = Table::new(
        "update-and-launch",
        "Update every node's argument, then launch (chain), CPU time per node",
        "Stream launches take the new value in each launch. Graphs: N per-node updates, then \
         one launch; timed from the first update to the return of the launch call.",
        &ns,
    );
    let ls = upl.row(STREAM, Some(RAW));
    let lr = upl.row(RAW, None);
    let la = upl.row(ARG, Some(RAW));
    let las = upl.row(ARGS, Some(RAW));
    let mut whole = WholeGraph::new(&ns);
    let mut arg_allocs = AllocCount::default();
    let mut args_allocs = AllocCount::default();
    // The primary context the driver's parameters name (the crate's updates name the same).
    // SAFETY: the bench's device exists; released at the end of the experiment.
    let ctx = unsafe { cudagraph::result::driver::primary_ctx_retain(b.device.ordinal() as i32)? };

    for (ni, &n) in ns.iter().enumerate() {
        let st = stages(topology, n);
        let reps = b.reps(n);
        let raw_graph = b.build_raw(topology, n, 1)?;
        let raw_exec = b.instantiate_raw(&raw_graph)?;
        let cap_graph = b.capture(&st, 1)?;
        let cap_exec = b.instantiate_raw(&cap_graph)?;
        let (mut dag, ids) = b.build_dag(topology, n, 1)?;
        let mut exec = dag.instantiate(&b.device)?;
        // SAFETY: the counter outlives the raw graph's launches (synchronised below).
        let args = RawArgs::new(unsafe { b.counter.as_raw_ptr() }, 1);
        let params = b.raw_params(&args);
        let mut generic = b.raw_generic_params(&args);
        let driver = b.raw_driver_params(&args, ctx);
        let c = &b.counter;

        let raw_updates = |v: u32| -> Result<()> {
            for (i, &node) in raw_graph.nodes.iter().enumerate() {
                args.set(v.wrapping_add(i as u32));
                // SAFETY: `node` is a kernel node of the graph `raw_exec` came from; same
                // kernel; CUDA copies the argument values.
                ck("cudaGraphExecKernelNodeSetParams", unsafe {
                    (b.api.exec_kernel_node_set_params)(raw_exec.exec, node, &params)
                })?;
            }
            Ok(())
        };
        let mut raw_generic_updates = |v: u32| -> Result<()> {
            for (i, &node) in raw_graph.nodes.iter().enumerate() {
                args.set(v.wrapping_add(i as u32));
                // SAFETY: as above; `generic` holds the same kernel node parameters.
                ck("cudaGraphExecNodeSetParams", unsafe {
                    (b.api.exec_node_set_params)(raw_exec.exec, node, &mut generic)
                })?;
            }
            Ok(())
        };

        let raw_driver_updates = |v: u32| -> Result<()> {
            for (i, &node) in raw_graph.nodes.iter().enumerate() {
                args.set(v.wrapping_add(i as u32));
                // SAFETY: as above; `driver` holds the same launch, given as kernel and
                // context (retained above).
                ck_drv("cuGraphExecKernelNodeSetParams", unsafe {
                    (b.api.drv_exec_kernel_node_set_params)(raw_exec.exec, node, &driver)
                })?;
            }
            Ok(())
        };

        // Warm-up: every update path and launch once (the first buffer update of an Exec may
        // grow its list of replaced buffers; later ones reuse it).
        raw_generic_updates(1)?;
        raw_driver_updates(1)?;
        raw_updates(1)?;
        b.launch_raw(&raw_exec)?;
        for &id in &ids {
            exec.set_kernel_arg(id, 1, 1u32)?;
            exec.set_kernel_args(id, &args![c, 1u32])?;
        }
        exec.launch(&b.stream)?;
        exec.synchronize()?;
        b.sync()?;

        // Per-node updates, no launch.
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 5];
        for rep in 0..reps.update {
            let v = rep as u32 * 7 + 2;
            // Each repetition starts with the next method, so that none always runs first.
            for k in 0..5 {
                match (rep + k) % 5 {
                    0 => {
                        let t0 = Instant::now();
                        raw_updates(v)?;
                        s[0].push(us_per_node(t0.elapsed(), n));
                    }
                    1 => {
                        let t0 = Instant::now();
                        raw_generic_updates(v)?;
                        s[3].push(us_per_node(t0.elapsed(), n));
                    }
                    4 => {
                        let t0 = Instant::now();
                        raw_driver_updates(v)?;
                        s[4].push(us_per_node(t0.elapsed(), n));
                    }
                    2 => {
                        let (a, (t, updated)) = count(|| {
                            let t0 = Instant::now();
                            let r = ids.iter().enumerate().try_for_each(|(i, &id)| {
                                exec.set_kernel_arg(id, 1, v.wrapping_add(i as u32))
                            });
                            (t0.elapsed(), r)
                        });
                        updated?;
                        arg_allocs.add(a, n as u64);
                        s[1].push(us_per_node(t, n));
                    }
                    _ => {
                        let (a, (t, updated)) = count(|| {
                            let t0 = Instant::now();
                            let r = ids.iter().enumerate().try_for_each(|(i, &id)| {
                                exec.set_kernel_args(id, &args![c, v.wrapping_add(i as u32)])
                            });
                            (t0.elapsed(), r)
                        });
                        updated?;
                        args_allocs.add(a, n as u64);
                        s[2].push(us_per_node(t, n));
                    }
                }
            }
        }
        exec.synchronize()?;
        per.set(pr, ni, median(&mut s[0]));
        per.set(pg, ni, median(&mut s[3]));
        per.set(pd, ni, median(&mut s[4]));
        per.set(pa, ni, median(&mut s[1]));
        per.set(pas, ni, median(&mut s[2]));

        // Update + launch.
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 4];
        for rep in 0..reps.update {
            let v = rep as u32 * 5 + 3;
            b.sync()?;
            let t0 = Instant::now();
            b.submit_stream(&st, v)?;
            s[0].push(us_per_node(t0.elapsed(), n));

            b.sync()?;
            let t0 = Instant::now();
            raw_updates(v)?;
            b.launch_raw(&raw_exec)?;
            s[1].push(us_per_node(t0.elapsed(), n));

            exec.synchronize()?;
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_arg(id, 1, v.wrapping_add(i as u32))?;
            }
            exec.launch(&b.stream)?;
            s[2].push(us_per_node(t0.elapsed(), n));

            exec.synchronize()?;
            let t0 = Instant::now();
            for (i, &id) in ids.iter().enumerate() {
                exec.set_kernel_args(id, &args![c, v.wrapping_add(i as u32)])?;
            }
            exec.launch(&b.stream)?;
            s[3].push(us_per_node(t0.elapsed(), n));
        }
        exec.synchronize()?;
        b.sync()?;
        for (row, k) in [(ls, 0), (lr, 1), (la, 2), (las, 3)] {
            upl.set(row, ni, median(&mut s[k]));
        }

        // Whole-graph update vs re-instantiation.
        whole.measure(
            b,
            ni,
            topology,
            n,
            reps.whole,
            Graphs {
                stages: &st,
                raw_exec: &raw_exec,
                cap_exec: &cap_exec,
                dag: &mut dag,
                ids: &ids,
                exec: &mut exec,
            },
        )?;

        // The updates took effect: one launch of each graph with the last value.
        if n <= 1000 {
            let v = 11u32;
            b.reset_counter()?;
            for &id in &ids {
                exec.set_kernel_arg(id, 1, v)?;
            }
            exec.launch(&b.stream)?;
            exec.synchronize()?;
            let got = b.read_counter()?;
            if got != v * n as u32 {
                bail!(
                    "after updates, cudagraph counted {got}, expected {}",
                    v * n as u32
                );
            }
        }
        b.sync()?;
        drop(exec);
        drop(args);
        drop((cap_exec, cap_graph, raw_exec, raw_graph));
        progress(&format!("update, N={n}"), t_start);
    }

    // SAFETY: retained above; the graphs that used it are gone.
    unsafe { cudagraph::result::driver::primary_ctx_release(b.device.ordinal() as i32)? };
    for label in [ARG, ARGS] {
        let (detail, worst) = ratio_summary(&per, label, &ns);
        report.target(
            format!(
                "typed argument update (`{}`): within 5% of raw \
                 cudaGraphExecKernelNodeSetParams",
                label.trim_start_matches("cudagraph: ")
            ),
            detail,
            worst,
            1.05,
        );
        let (vs_driver, _) = ratio_between(&per, label, RAW_DRV_SET, &ns);
        report.info(
            format!(
                "cudagraph vs the raw call it makes, `{}` against raw driver \
                 cuGraphExecKernelNodeSetParams",
                label.trim_start_matches("cudagraph: ")
            ),
            vs_driver,
        );
        let (vs_generic, _) = ratio_between(&per, label, RAW_GEN_SET, &ns);
        report.info(
            format!(
                "cudagraph vs raw generic API, `{}` against raw cudaGraphExecNodeSetParams",
                label.trim_start_matches("cudagraph: ")
            ),
            vs_generic,
        );
    }
    let (drv_raw, _) = ratio_summary(&per, RAW_DRV_SET, &ns);
    report.info(
        "raw cuGraphExecKernelNodeSetParams (driver API) against raw \
         cudaGraphExecKernelNodeSetParams"
            .into(),
        drv_raw,
    );
    let (gen_raw, _) = ratio_summary(&per, RAW_GEN_SET, &ns);
    report.info(
        "raw cudaGraphExecNodeSetParams (generic API) against raw \
         cudaGraphExecKernelNodeSetParams"
            .into(),
        gen_raw,
    );
    let mut allocs_detail = Vec::new();
    let mut worst = 0f64;
    for (what, a) in [
        ("Exec::launch", b.launch_allocs),
        ("Exec::set_kernel_arg", arg_allocs),
        ("Exec::set_kernel_args", args_allocs),
    ] {
        if a.calls > 0 {
            let per_call = a.allocations as f64 / a.calls as f64;
            worst = worst.max(per_call);
            allocs_detail.push(format!(
                "{what}: {} allocations in {} calls",
                a.allocations, a.calls
            ));
        }
    }
    report.target(
        "no heap allocation per update or per launch (after warm-up; also tests/no_alloc.rs)"
            .into(),
        allocs_detail.join("; "),
        (!allocs_detail.is_empty()).then_some(worst),
        0.0,
    );
    report.table(per);
    report.table(upl);
    report.table(whole.table);
    Ok(())
}
