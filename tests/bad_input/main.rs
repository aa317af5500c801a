//! The catalogue of bad input (issue 26): every case gets a typed error that names the problem
//! (and the node, where there is one), and leaves nothing half-built: a refused builder call
//! leaves the DAG's nodes and edges as they were, and a refused lowering makes no graph call on
//! the (recording) backend. No GPU needed. The README's "Errors" section lists these cases,
//! with the spectrometer's (`spectrometer/tests/{errors,raw_input,first_user}.rs`).

mod builder;
mod node_kinds;

use cudagraph::fft::{FftPlanDesc, FftType};
use cudagraph::nccl::{Communicators, ReduceOp};
use cudagraph::{
    args, dst, src, Copy2d, Dag, DagError, DeviceLimits, Dim3, Error, FftPlan, LaunchAttributes,
    LaunchConfig, Memset2d, ProgrammaticPort, RecordingBackend,
};

fn rec() -> RecordingBackend {
    RecordingBackend::new(DeviceLimits::hopper())
}

/// Runs `f` on `dag`, which must refuse with an error `check` accepts, leaving the DAG's
/// nodes and edges unchanged; returns the error's text.
fn refused<T: std::fmt::Debug>(
    case: &str,
    dag: &mut Dag,
    f: impl FnOnce(&mut Dag) -> cudagraph::Result<T>,
    check: impl FnOnce(&Error) -> bool,
) -> String {
    let before = (dag.node_count(), dag.edge_count(), dot_edges(dag));
    let e = match f(dag) {
        Ok(v) => panic!("{case}: accepted ({v:?})"),
        Err(e) => e,
    };
    assert!(check(&e), "{case}: wrong error {e:?}");
    let after = (dag.node_count(), dag.edge_count(), dot_edges(dag));
    assert_eq!(before, after, "{case}: the DAG changed");
    e.to_string()
}

fn dot_edges(dag: &Dag) -> Vec<(u64, u64)> {
    let mut v: Vec<_> = dag.edges().map(|(a, b)| (a.serial(), b.serial())).collect();
    v.sort();
    v
}

/// Lowers `dag`, which must be refused with an error `check` accepts, with no call made.
fn lowering_refused(
    case: &str,
    dag: &Dag,
    r: &mut RecordingBackend,
    check: impl FnOnce(&Error) -> bool,
) -> String {
    r.clear();
    let e = dag.lower(r).expect_err(case);
    assert!(check(&e), "{case}: wrong error {e:?}");
    assert_eq!(r.call_count(), 0, "{case}: calls were made");
    e.to_string()
}

fn has(text: &str, words: &[&str]) -> bool {
    words.iter().all(|w| text.contains(w))
}
