//! Per-node profiling: `Exec.profile` and `Profile`.

use std::path::PathBuf;

use cudagraph::Profile;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::dag::PyNode;
use crate::device::refuse_in_host_callable;
use crate::errors::IntoPy;
use crate::exec::PyExec;

/// What ``Exec.profile`` measured: each node's time over the launches (the nodes run one at a
/// time, in topological order, with events between them, in a sequential copy of the graph),
/// slowest first. ``str(profile)`` is the table; ``to_dot()`` colours each node by its share.
#[pyclass(module = "cudagraph._cudagraph", name = "Profile", frozen)]
pub(crate) struct PyProfile {
    inner: Profile,
    /// The DAG whose nodes the entries are.
    dag: u64,
}

#[pymethods]
impl PyProfile {
    /// One dict per node, slowest first: ``node``, ``name``, ``kind``, ``mean``, ``min``,
    /// ``max`` (seconds) and ``share`` (of ``total``, 0 to 1).
    #[getter]
    fn nodes<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.inner
            .nodes()
            .iter()
            .map(|n| {
                let d = PyDict::new(py);
                d.set_item(
                    "node",
                    PyNode {
                        id: n.node,
                        dag: self.dag,
                    },
                )?;
                d.set_item("name", &n.name)?;
                d.set_item("kind", n.kind.as_str())?;
                d.set_item("mean", n.mean.as_secs_f64())?;
                d.set_item("min", n.min.as_secs_f64())?;
                d.set_item("max", n.max.as_secs_f64())?;
                d.set_item("share", n.share)?;
                Ok(d)
            })
            .collect()
    }

    /// The sum of the nodes' mean times, in seconds.
    #[getter]
    fn total(&self) -> f64 {
        self.inner.total().as_secs_f64()
    }

    /// How many launches were timed (the warm-up launch not counted).
    #[getter]
    fn launches(&self) -> u32 {
        self.inner.launches()
    }

    /// The sequential graph's mean time per launch, in seconds, from events recorded on the
    /// stream around each launch (``total`` plus the launch latency).
    #[getter]
    fn launch_time(&self) -> Option<f64> {
        self.inner.launch_time().map(|d| d.as_secs_f64())
    }

    /// The DAG in DOT, each node filled by its share and labelled with its times.
    fn to_dot(&self) -> String {
        self.inner.to_dot()
    }

    /// Renders ``to_dot()`` to an SVG file with Graphviz ``dot`` (a ``CudaGraphError`` where
    /// it is not installed).
    fn write_svg(&self, path: PathBuf) -> PyResult<()> {
        self.inner.write_svg(path).py_err()
    }

    fn __str__(&self) -> String {
        self.inner.to_string()
    }
}

#[pymethods]
impl PyExec {
    /// Times each node over ``launches`` launches of a sequential copy of the graph on
    /// ``stream`` (the ``Exec``'s own when not given; any stream ``launch`` takes): the
    /// ``Exec`` is not touched, but the nodes really run ``launches + 1`` times (their buffers
    /// hold what those runs wrote; host callables are called). Collective nodes cannot be
    /// profiled. Blocks for about ``launches + 1`` times the sequential graph's time, with the
    /// GIL released.
    #[pyo3(signature = (launches=100, stream=None))]
    fn profile(
        &mut self,
        py: Python<'_>,
        launches: u32,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyProfile> {
        refuse_in_host_callable("Exec.profile()")?;
        let s = self.stream(stream)?;
        let dag = *self.dags.last().expect("an Exec is made from a DAG");
        let exec = self.exec();
        let inner = py
            .allow_threads(move || exec.profile(&s, launches))
            .py_err()?;
        Ok(PyProfile { inner, dag })
    }
}
