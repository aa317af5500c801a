//! The whole-graph part of experiment `update` (table `update-whole-graph`): every node gets a
//! new argument, then the executable graph is updated as a whole or instantiated again, by the
//! raw calls, by stream capture and by the crate. `update.rs` measures it at every N, on the
//! graphs it built for its per-node updates.

use std::time::Instant;

use anyhow::Result;
use cudagraph::{args, Dag, Exec, NodeId};

use crate::bench::{us_per_node, Bench};
use crate::host::{median, Topology};
use crate::raw::RawExec;
use crate::report::Table;

/// The executable graphs (made once per N by `update.rs`) that the whole-graph updates
/// replace the parameters of.
pub struct Graphs<'a> {
    /// The stage widths of the DAG (for the stream capture).
    pub stages: &'a [usize],
    /// Made from the raw explicit graph.
    pub raw_exec: &'a RawExec,
    /// Made from the captured graph.
    pub cap_exec: &'a RawExec,
    /// The crate's DAG (instantiated again, and updated node by node).
    pub dag: &'a mut Dag,
    /// Its kernel nodes.
    pub ids: &'a [NodeId],
    /// Its executable graph (updated from `dag` as a whole).
    pub exec: &'a mut Exec,
}

/// The `update-whole-graph` table and its eight rows.
pub struct WholeGraph {
    /// The table, filled in by [`WholeGraph::measure`].
    pub table: Table,
    rows: [usize; 8],
}

impl WholeGraph {
    /// The table with its rows and the columns `ns`, still empty.
    pub fn new(ns: &[usize]) -> WholeGraph {
        const R_UPD: &str = "raw graph: cudaGraphExecUpdate only";
        const R_INST: &str = "raw graph: cudaGraphInstantiate only";
        const R_BU: &str = "raw graph: rebuild + cudaGraphExecUpdate";
        const R_BI: &str = "raw graph: rebuild + re-instantiate";
        let mut whole = Table::new(
            "update-whole-graph",
            "Whole-graph update vs re-instantiation (chain), CPU time per node",
            "Every node gets a new argument. Raw: a new graph built with the raw calls, then \
             `cudaGraphExecUpdate` into the executable graph, or `cudaGraphInstantiate` of it. \
             Stream capture: the work captured again, then the same. cudagraph: \
             `Dag::set_kernel_args` on every node, then `Exec::update(&dag)` (validation, \
             lowering, `cudaGraphExecUpdate`), or `Dag::instantiate`.",
            ns,
        );
        let wu = whole.row(R_UPD, None);
        let wi = whole.row(R_INST, None);
        let wbu = whole.row(R_BU, None);
        let wbi = whole.row(R_BI, None);
        let wcu = whole.row(
            "stream capture: re-capture + cudaGraphExecUpdate",
            Some(R_BU),
        );
        let wci = whole.row("stream capture: re-capture + re-instantiate", Some(R_BI));
        let wku = whole.row("cudagraph: Dag::set_kernel_args + Exec::update", Some(R_BU));
        let wki = whole.row(
            "cudagraph: Dag::set_kernel_args + Dag::instantiate",
            Some(R_BI),
        );
        WholeGraph {
            table: whole,
            rows: [wu, wi, wbu, wbi, wcu, wci, wku, wki],
        }
    }

    /// Measures column `ni` (`n` nodes of shape `topology`), `reps` repetitions after a
    /// warm-up one, and sets the medians.
    pub fn measure(
        &mut self,
        b: &Bench,
        ni: usize,
        topology: Topology,
        n: usize,
        reps: usize,
        graphs: Graphs<'_>,
    ) -> Result<()> {
        let c = &b.counter;
        let mut s: Vec<Vec<f64>> = vec![Vec::new(); 8];
        for rep in 0..=reps {
            let v = rep as u32 * 3 + 4;
            let mut x = [0f64; 8];
            // raw
            let t0 = Instant::now();
            let g = b.build_raw(topology, n, v)?;
            let tb = t0.elapsed();
            let t0 = Instant::now();
            b.exec_update_raw(graphs.raw_exec, &g)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let e = b.instantiate_raw(&g)?;
            let ti = t0.elapsed();
            drop((e, g));
            x[0] = us_per_node(tu, n);
            x[1] = us_per_node(ti, n);
            x[2] = us_per_node(tb + tu, n);
            x[3] = us_per_node(tb + ti, n);
            // capture
            let t0 = Instant::now();
            let g = b.capture(graphs.stages, v)?;
            let tc = t0.elapsed();
            let t0 = Instant::now();
            b.exec_update_raw(graphs.cap_exec, &g)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let e = b.instantiate_raw(&g)?;
            let ti = t0.elapsed();
            drop((e, g));
            x[4] = us_per_node(tc + tu, n);
            x[5] = us_per_node(tc + ti, n);
            // cudagraph
            let t0 = Instant::now();
            for &id in graphs.ids {
                graphs.dag.set_kernel_args(id, &args![c, v])?;
            }
            let ts = t0.elapsed();
            let t0 = Instant::now();
            graphs.exec.update(graphs.dag)?;
            let tu = t0.elapsed();
            let t0 = Instant::now();
            let fresh = graphs.dag.instantiate(&b.device)?;
            let ti = t0.elapsed();
            drop(fresh);
            graphs.exec.synchronize()?; // releases the DAG copy the update replaced
            x[6] = us_per_node(ts + tu, n);
            x[7] = us_per_node(ts + ti, n);
            if rep > 0 {
                for (k, val) in x.iter().enumerate() {
                    s[k].push(*val);
                }
            }
        }
        for (k, &row) in self.rows.iter().enumerate() {
            self.table.set(row, ni, median(&mut s[k]));
        }
        Ok(())
    }
}
