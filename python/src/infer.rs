//! Dependencies inferred from data access: the `In`, `Out` and `InOut` marks of kernel
//! arguments, `Dag.infer_dependencies` and `Dag.races`.

use cudagraph::Access;
use pyo3::prelude::*;

use crate::dag::{PyDag, PyNode};

macro_rules! marks {
    ($($(#[$doc:meta])* $rust:ident => $py:literal, $access:expr;)*) => {$(
        $(#[$doc])*
        #[pyclass(module = "cudagraph._cudagraph", name = $py, frozen)]
        pub(crate) struct $rust {
            array: PyObject,
        }

        #[pymethods]
        impl $rust {
            #[new]
            fn new(array: PyObject) -> Self {
                $rust { array }
            }

            /// The marked array.
            #[getter]
            fn array(&self, py: Python<'_>) -> PyObject {
                self.array.clone_ref(py)
            }

            fn __repr__(&self, py: Python<'_>) -> String {
                let inner = self
                    .array
                    .bind(py)
                    .repr()
                    .map(|r| r.to_string())
                    .unwrap_or_default();
                format!("{}({inner})", $py)
            }
        }

        impl $rust {
            const ACCESS: Access = $access;
        }
    )*

    /// The array a mark wraps and the access it states; `None` for an unmarked argument.
    pub(crate) fn marked<'py>(obj: &Bound<'py, PyAny>) -> Option<(Bound<'py, PyAny>, Access)> {
        $(
            if let Ok(m) = obj.downcast::<$rust>() {
                return Some((m.get().array.bind(obj.py()).clone(), $rust::ACCESS));
            }
        )*
        None
    }
    };
}

marks! {
    /// Marks a kernel argument (a buffer or array) as only read by the kernel:
    /// ``dag.add_kernel(k, grid, block, [cg.In(x), cg.Out(y), n])``. ``Dag.infer_dependencies``
    /// then orders the node after the last writer of those bytes and lets it run beside other
    /// readers. An unmarked buffer argument counts as read and written, all of its memory.
    PyIn => "In", Access::Read;
    /// Marks a kernel argument as only written by the kernel (see ``In``).
    PyOut => "Out", Access::Write;
    /// Marks a kernel argument as read and written by the kernel (see ``In``).
    PyInOut => "InOut", Access::ReadWrite;
}

/// An edge or race as ``(first, second, hazard)``: the two nodes and what they both touch, as
/// text (``"RAW 0x7f00000000[0..4096]"``: the hazard, the memory's address, the bytes).
type Pair = (PyNode, PyNode, String);

#[pymethods]
impl PyDag {
    /// Adds the edges that the nodes' data accesses need and returns them as ``(before, after,
    /// hazard)``: for every two nodes that touch overlapping bytes of one allocation, at least
    /// one writing, the later one in program order (the order nodes were added in, unless edges
    /// say otherwise) waits for the earlier one, unless a path between them exists already.
    /// Edges that others imply are left out; reads of the same bytes stay parallel. A kernel's
    /// buffer argument counts as read and written, all of it, unless marked ``In``, ``Out`` or
    /// ``InOut``; copies and memsets touch their ends, FFT nodes their regions; a host node
    /// touches everything. The edges show dashed in ``to_dot()``, labelled with the hazard.
    /// Memory is told apart by allocation: two arrays of another library over one memory are
    /// two allocations here.
    fn infer_dependencies(&mut self) -> Vec<Pair> {
        let edges = self.dag_mut().infer_dependencies();
        edges
            .into_iter()
            .map(|e| {
                (
                    self.node(e.before),
                    self.node(e.after),
                    e.hazard.to_string(),
                )
            })
            .collect()
    }

    /// The pairs of nodes that touch overlapping bytes, at least one writing, with no path
    /// between them (what ``infer_dependencies`` would order), as ``(first, second, hazard)``;
    /// empty for a DAG whose edges order every conflict.
    fn races(&self) -> Vec<Pair> {
        self.dag()
            .races()
            .into_iter()
            .map(|r| {
                (
                    self.node(r.first),
                    self.node(r.second),
                    r.hazard.to_string(),
                )
            })
            .collect()
    }
}
