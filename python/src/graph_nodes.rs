//! The objects of the later node kinds: `Event` (event record / wait nodes), `Conditional`
//! (conditional nodes' handles), `GraphBuffer` (graph allocations) and `DeviceNode`
//! (device-updatable kernel nodes).

use cudagraph::{Conditional, DeviceNode, Event, GraphBuffer, KernelArg, NodeId};
use pyo3::prelude::*;

use crate::device::{drain_graveyard, drop_detached, refuse_in_host_callable, PyDevice, PyStream};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};

/// A CUDA event (timing enabled), for ordering work between graphs and streams and timing it:
/// ``Dag.add_event_record(event)`` / ``Dag.add_event_wait(event)`` nodes, ``record(stream)`` on
/// a stream. ``Event(device)`` creates one on ``device`` (``Device(0)`` when not given);
/// ``RecordingBackend.event()`` makes a placeholder for building DAGs without a GPU.
///
/// The event is destroyed when the last of this object and the nodes (DAGs, ``Exec``s) using
/// it is gone: a node keeps its event alive.
#[pyclass(module = "cudagraph._cudagraph", name = "Event", frozen)]
pub(crate) struct PyEvent {
    inner: Option<Event>,
    /// Its device (`None` for a recording backend's placeholder), for wrapping other libraries'
    /// streams in `record`.
    device: Option<cudagraph::Device>,
}

impl Drop for PyEvent {
    fn drop(&mut self) {
        if let Some(e) = self.inner.take() {
            drop_detached(e);
        }
    }
}

impl PyEvent {
    /// A recording backend's placeholder event.
    pub(crate) fn placeholder(event: Event) -> Self {
        PyEvent {
            inner: Some(event),
            device: None,
        }
    }

    pub(crate) fn event(&self) -> &Event {
        self.inner.as_ref().expect("taken only by Drop")
    }
}

#[pymethods]
impl PyEvent {
    /// Creates an event on ``device`` (``Device(0)`` when not given).
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(device: Option<PyRef<'_, PyDevice>>) -> PyResult<Self> {
        refuse_in_host_callable("Event()")?;
        let device = match device {
            Some(d) => d.inner.clone(),
            None => crate::device::open_device(0)?,
        };
        Ok(PyEvent {
            inner: Some(Event::new(&device).py_err()?),
            device: Some(device),
        })
    }

    /// Records the event on ``stream`` (a cudagraph ``Stream``, an object with
    /// ``__cuda_stream__``, a CuPy or PyTorch stream, on the event's device): it completes when
    /// the work queued on the stream before it has.
    fn record(&self, py: Python<'_>, stream: &Bound<'_, PyAny>) -> PyResult<()> {
        refuse_in_host_callable("Event.record()")?;
        let s = if let Ok(s) = stream.downcast::<PyStream>() {
            s.get().stream().clone()
        } else {
            let raw = crate::exec::foreign_stream_handle(stream)?;
            let Some(device) = &self.device else {
                return Err(invalid(
                    "the event is a recording backend's placeholder: it cannot be recorded on \
                     a GPU stream",
                ));
            };
            crate::exec::foreign_stream(stream, raw, device, "the event")?
        };
        let e = self.event().clone();
        py.allow_threads(move || e.record(&s)).py_err()
    }

    /// Whether the work before the event's last record has completed (``True`` for an event
    /// never recorded).
    fn query(&self, py: Python<'_>) -> PyResult<bool> {
        refuse_in_host_callable("Event.query()")?;
        let e = self.event().clone();
        py.allow_threads(move || e.query()).py_err()
    }

    /// Waits until the event has completed (the GIL is released meanwhile). Inside a host
    /// callable: ``ValidationError`` (it may wait for the host node itself).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        refuse_in_host_callable("Event.synchronize()")?;
        let e = self.event().clone();
        py.allow_threads(move || {
            let r = e.synchronize();
            drain_graveyard();
            r
        })
        .py_err()
    }

    /// Milliseconds from this event to the later event ``end`` (both recorded and completed).
    fn elapsed_ms(&self, py: Python<'_>, end: PyRef<'_, PyEvent>) -> PyResult<f32> {
        refuse_in_host_callable("Event.elapsed_ms()")?;
        let (a, b) = (self.event().clone(), end.event().clone());
        py.allow_threads(move || a.elapsed_ms(&b)).py_err()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.event())
    }
}

/// A conditional handle of a ``Dag`` (``Dag.conditional_handle(default)``): the value a
/// conditional node (``add_if``, ``add_if_else``, ``add_while``, ``add_switch``) tests, reset to
/// ``default`` at the start of every launch. Pass it as a kernel argument (a
/// ``cudaGraphConditionalHandle`` parameter) to the kernels that set it with
/// ``cudaGraphSetConditional(handle, value)``, in the DAG that declared it or in the bodies of
/// its conditional nodes; their source starts with ``CONDITIONAL_INCLUDE``.
#[pyclass(module = "cudagraph._cudagraph", name = "Conditional", frozen)]
pub(crate) struct PyConditional {
    pub(crate) inner: Conditional,
}

#[pymethods]
impl PyConditional {
    /// The value the handle has at the start of every launch.
    #[getter]
    fn default(&self) -> u32 {
        self.inner.default_value()
    }

    /// Its number among its DAG's handles (DOT and recordings show ``handle #n``).
    #[getter]
    fn index(&self) -> u32 {
        self.inner.index()
    }

    fn __repr__(&self) -> String {
        format!(
            "Conditional(#{}, default={})",
            self.inner.index(),
            self.inner.default_value()
        )
    }
}

/// A device-updatable kernel node (``Dag.device_node(node)``), as the kernels that update it
/// on the GPU see it: pass it as a kernel argument (a ``cudaGraphDeviceNode_t`` parameter) to
/// kernels of the same DAG, which call ``cudaGraphKernelNodeSetGridDim``,
/// ``cudaGraphKernelNodeSetEnabled`` or ``cudaGraphKernelNodeSetParam`` on it; their source
/// starts with ``DEVICE_UPDATE_INCLUDE``.
#[pyclass(module = "cudagraph._cudagraph", name = "DeviceNode", frozen)]
pub(crate) struct PyDeviceNode {
    pub(crate) inner: DeviceNode,
    pub(crate) node: NodeId,
}

#[pymethods]
impl PyDeviceNode {
    /// Its number among its DAG's device-updatable nodes (DOT and recordings show
    /// ``device node #n``).
    #[getter]
    fn index(&self) -> u32 {
        self.inner.index()
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceNode(#{}, kernel Node({}))",
            self.inner.index(),
            self.node.index()
        )
    }
}

/// A graph buffer whose element type is the dtype's Rust counterpart (named in DOT labels):
/// `f32`, `i16`, `[f32; 2]` for ``complex64``; ``float16`` and ``bool`` as `u16` and `u8`.
#[derive(Clone, Copy)]
pub(crate) enum GraphBuf {
    F32(GraphBuffer<f32>),
    F64(GraphBuffer<f64>),
    I8(GraphBuffer<i8>),
    I16(GraphBuffer<i16>),
    I32(GraphBuffer<i32>),
    I64(GraphBuffer<i64>),
    U8(GraphBuffer<u8>),
    U16(GraphBuffer<u16>),
    U32(GraphBuffer<u32>),
    U64(GraphBuffer<u64>),
    C64(GraphBuffer<[f32; 2]>),
    C128(GraphBuffer<[f64; 2]>),
}

/// Runs `$e` with `$b` bound to the graph buffer of whatever element type.
macro_rules! each_graph_buf {
    ($self:expr, $b:ident => $e:expr) => {{
        use $crate::graph_nodes::GraphBuf as G;
        match $self {
            G::F32($b) => $e,
            G::F64($b) => $e,
            G::I8($b) => $e,
            G::I16($b) => $e,
            G::I32($b) => $e,
            G::I64($b) => $e,
            G::U8($b) => $e,
            G::U16($b) => $e,
            G::U32($b) => $e,
            G::U64($b) => $e,
            G::C64($b) => $e,
            G::C128($b) => $e,
        }
    }};
}
pub(crate) use each_graph_buf;

impl GraphBuf {
    /// Allocates `len` elements of `dtype` in `dag` (`Dag::add_alloc`).
    pub(crate) fn alloc(
        dag: &mut cudagraph::Dag,
        dtype: Dtype,
        len: usize,
    ) -> cudagraph::Result<(NodeId, GraphBuf)> {
        macro_rules! alloc {
            ($t:ty, $v:ident) => {{
                let (n, b) = dag.add_alloc::<$t>(len)?;
                (n, GraphBuf::$v(b))
            }};
        }
        Ok(match (dtype.kind, dtype.size) {
            ('f', 4) => alloc!(f32, F32),
            ('f', 8) => alloc!(f64, F64),
            ('i', 1) => alloc!(i8, I8),
            ('i', 2) => alloc!(i16, I16),
            ('i', 4) => alloc!(i32, I32),
            ('i', 8) => alloc!(i64, I64),
            ('c', 8) => alloc!([f32; 2], C64),
            ('c', 16) => alloc!([f64; 2], C128),
            (_, 1) => alloc!(u8, U8),
            (_, 2) => alloc!(u16, U16),
            (_, 4) => alloc!(u32, U32),
            (_, 8) => alloc!(u64, U64),
            // `Dtype` admits no other size (16 bytes is complex128).
            (_, _) => alloc!([f64; 2], C128),
        })
    }

    /// The buffer as a kernel argument (its address, written in at lowering).
    pub(crate) fn arg(&self) -> KernelArg<'static> {
        each_graph_buf!(self, b => KernelArg::graph_buffer(b))
    }
}

/// Memory a graph allocates when a launch reaches its allocation node
/// (``Dag.add_alloc(shape, dtype)``) and frees at its free node (``Dag.add_free``), from
/// CUDA's graph memory pool. Its address exists only inside a launch: pass it as a kernel
/// argument (a pointer parameter) or fill it with ``Dag.add_graph_memset``, in nodes of the
/// same DAG ordered after its allocation and before its free (validation checks, naming the
/// node). Its contents are undefined until a node writes them.
#[pyclass(module = "cudagraph._cudagraph", name = "GraphBuffer", frozen)]
pub(crate) struct PyGraphBuffer {
    pub(crate) buf: GraphBuf,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<usize>,
}

#[pymethods]
impl PyGraphBuffer {
    /// The shape it was allocated with.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
        pyo3::types::PyTuple::new(py, &self.shape)
    }

    /// The element type's typestr (``<f4``), as ``DeviceBuffer.dtype``.
    #[getter]
    fn dtype(&self) -> String {
        self.dtype.typestr()
    }

    /// Its size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        each_graph_buf!(&self.buf, b => b.size_bytes())
    }

    /// Its number among its DAG's allocations (DOT and errors show ``graph buffer #n``).
    #[getter]
    fn index(&self) -> u32 {
        each_graph_buf!(&self.buf, b => b.index())
    }

    fn __repr__(&self) -> String {
        format!(
            "GraphBuffer(#{}, shape={:?}, dtype={})",
            self.index(),
            self.shape,
            self.dtype.name()
        )
    }
}
