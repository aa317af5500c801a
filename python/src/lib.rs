//! The `cudagraph._cudagraph` extension module: Python bindings of the cudagraph crate.
//!
//! The Python package (`python/cudagraph/__init__.py`) re-exports everything here. Objects that
//! hold GPU work (`Dag`, `Exec`) may be used from any thread, one call at a time (PyO3's
//! borrow of the object; the `Exec` sits in a `Mutex` to be `Sync`); `RecordingBackend` is
//! `unsendable`; buffers, devices, streams, kernels and nodes are immutable (`frozen`) and
//! shareable. Every call that may wait for the GPU releases the GIL, and so does dropping an
//! object that may wait (a host node queued before it may need the GIL to finish).

use pyo3::prelude::*;

mod buffers;
mod captured;
mod dag;
mod device;
mod dlpack;
mod dtype;
mod errors;
mod exec;
mod fft;
mod gemm;
mod graph_nodes;
mod infer;
mod kernel;
mod nccl;
mod profile;
mod typed;

/// Runs `callable` the way a host node does (on another thread, taking the GIL; an exception
/// kept and reported as the crate reports a failed host closure) and returns the error a
/// launch would raise then, or `None`; with `report=False` the failure is left unreported (as
/// when a later launch fails again before one is reported). For testing host callables
/// without a GPU.
#[pyfunction]
#[pyo3(signature = (callable, report=true))]
fn _run_as_host_node(py: Python<'_>, callable: Py<PyAny>, report: bool) -> PyResult<Option<PyErr>> {
    let f = device::host_closure(callable);
    let outcome = py.allow_threads(move || {
        std::thread::spawn(move || std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
            .join()
            .expect("the closure's panic is caught inside the thread")
    });
    if !report {
        return Ok(None);
    }
    Ok(outcome.err().map(|payload| {
        let message = payload
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        errors::to_py(cudagraph::Error::HostNodePanicked {
            node: "host#test".into(),
            message,
        })
    }))
}

/// Build CUDA graphs explicitly as DAGs, validate them, draw them as DOT, launch and update
/// them (the cudagraph Rust crate, from Python).
#[pymodule]
fn _cudagraph(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<device::PyDevice>()?;
    m.add_class::<device::PyStream>()?;
    m.add_class::<device::PyRecordingBackend>()?;
    m.add_class::<buffers::PyDeviceBuffer>()?;
    m.add_class::<buffers::PyHostBuffer>()?;
    m.add_class::<kernel::PyCudaModule>()?;
    m.add_class::<kernel::PyKernel>()?;
    m.add_class::<dag::PyNode>()?;
    m.add_class::<dag::PyDag>()?;
    m.add_class::<exec::PyExec>()?;
    m.add_class::<fft::PyFftPlan>()?;
    m.add_class::<gemm::PyBlas>()?;
    m.add_class::<profile::PyProfile>()?;
    m.add_class::<infer::PyIn>()?;
    m.add_class::<infer::PyOut>()?;
    m.add_class::<infer::PyInOut>()?;
    m.add_class::<nccl::PyCommunicators>()?;
    m.add_class::<nccl::PyComm>()?;
    m.add_class::<graph_nodes::PyEvent>()?;
    m.add_class::<captured::PyCaptureStream>()?;
    m.add_class::<graph_nodes::PyConditional>()?;
    m.add_class::<graph_nodes::PyGraphBuffer>()?;
    m.add_class::<graph_nodes::PyDeviceNode>()?;
    m.add("CONDITIONAL_INCLUDE", cudagraph::CONDITIONAL_INCLUDE)?;
    m.add("DEVICE_UPDATE_INCLUDE", cudagraph::DEVICE_UPDATE_INCLUDE)?;
    m.add_function(wrap_pyfunction!(_run_as_host_node, m)?)?;
    m.add_function(wrap_pyfunction!(device::_synchronize_all, m)?)?;
    m.add_function(wrap_pyfunction!(device::_at_exit, m)?)?;
    m.add_function(wrap_pyfunction!(device::_graveyard_len, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_host_errors_len, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
