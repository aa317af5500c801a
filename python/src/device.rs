//! `Device`, `Stream`, `RecordingBackend`, and where a buffer's memory comes from (`Origin`).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use cudagraph::{DeviceLimits, RecordingBackend, Stream};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{invalid, IntoPy};

/// Every device opened, for `synchronize_all` at exit.
static OPENED: Mutex<Vec<cudagraph::Device>> = Mutex::new(Vec::new());

/// Opens device `ordinal` (noting it for `synchronize_all`).
pub(crate) fn open_device(ordinal: usize) -> PyResult<cudagraph::Device> {
    let d = cudagraph::Device::get(ordinal).py_err()?;
    let mut opened = OPENED.lock().unwrap_or_else(|p| p.into_inner());
    if !opened.contains(&d) {
        opened.push(d.clone());
    }
    Ok(d)
}

/// Waits for all work on every device opened, with the GIL released: registered with
/// `atexit` by the package, so that host nodes still queued run (they take the GIL) before
/// the interpreter finalizes, when a thread taking the GIL would be stopped. Errors are
/// ignored (the process is exiting). Also frees what was dropped inside host callables
/// (`drain_graveyard`). Inside a host callable it raises `ValidationError` (it would wait for
/// the host node calling it).
#[pyfunction]
pub(crate) fn _synchronize_all(py: Python<'_>) -> PyResult<()> {
    refuse_in_host_callable("_synchronize_all")?;
    let devices = OPENED.lock().unwrap_or_else(|p| p.into_inner()).clone();
    py.allow_threads(move || {
        for d in devices {
            let _ = d.synchronize();
        }
        drain_graveyard();
    });
    Ok(())
}

/// Set by the `atexit` hook once it has waited for the devices: a host node that runs later
/// (launched by a thread that outlived the hook) does not call Python, which is finalizing
/// (a thread taking the GIL then may be stopped in the middle of CUDA's host function).
static EXITING: AtomicBool = AtomicBool::new(false);

/// Whether the interpreter is exiting (after the `atexit` hook) or finalized.
pub(crate) fn python_exiting() -> bool {
    // SAFETY: `Py_IsInitialized` may be called at any time, on any thread.
    EXITING.load(Ordering::Acquire) || unsafe { pyo3::ffi::Py_IsInitialized() } == 0
}

/// The `atexit` hook: waits for every device opened (`_synchronize_all`), then marks the
/// interpreter as exiting, so that host nodes running afterwards skip their callables and
/// fail instead.
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) -> PyResult<()> {
    _synchronize_all(py)?;
    EXITING.store(true, Ordering::Release);
    Ok(())
}

thread_local! {
    /// Set while this thread runs a host node's Python callable (`host_closure`): CUDA
    /// calls are forbidden there, and a wait for the GPU would wait for this very host node.
    static IN_HOST_CALLABLE: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as running a host callable until dropped.
pub(crate) struct HostCallableScope {
    was: bool,
}

impl HostCallableScope {
    pub(crate) fn enter() -> Self {
        HostCallableScope {
            was: IN_HOST_CALLABLE.with(|f| f.replace(true)),
        }
    }
}

impl Drop for HostCallableScope {
    fn drop(&mut self) {
        IN_HOST_CALLABLE.with(|f| f.set(self.was));
    }
}

/// Whether the current thread is running a host node's Python callable.
pub(crate) fn in_host_callable() -> bool {
    IN_HOST_CALLABLE.with(|f| f.get())
}

/// A `ValidationError` naming `what` when called inside a host callable, where waiting for the
/// GPU (or any CUDA call) would deadlock: the GPU waits for the host node that is calling.
pub(crate) fn refuse_in_host_callable(what: &str) -> PyResult<()> {
    if in_host_callable() {
        return Err(invalid(format!(
            "{what} called inside a host callable: waiting for the GPU there would deadlock \
             (CUDA forbids CUDA calls in a host node, and the GPU waits for the host node)"
        )));
    }
    Ok(())
}

/// What was dropped inside host callables, freed later (`drain_graveyard`) outside them:
/// freeing device memory, an `Exec`, a stream or a module makes CUDA calls, which a host
/// function must not make (`cudaFree` would wait for the host function itself).
static GRAVEYARD: Mutex<Vec<Box<dyn Send>>> = Mutex::new(Vec::new());

/// Whether `GRAVEYARD` may hold something: written only with its lock held, read without it so
/// that `drain_graveyard`, called on every launch, takes no lock when nothing is buried (the
/// common case). A stale `false` delays a drop to the next drain; it never loses one.
static BURIED: AtomicBool = AtomicBool::new(false);

/// Drops what `drop_detached` kept from host callables. Call it without the GIL held (the
/// drops may wait for the GPU) and outside host callables (it does nothing inside one).
pub(crate) fn drain_graveyard() {
    if !BURIED.load(Ordering::Acquire) || in_host_callable() {
        return;
    }
    let dead = {
        let mut grave = GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner());
        BURIED.store(false, Ordering::Release);
        std::mem::take(&mut *grave)
    };
    drop(dead);
}

/// The number of values waiting in the graveyard (for tests).
#[pyfunction]
pub(crate) fn _graveyard_len() -> usize {
    GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner()).len()
}

extern "C" {
    /// CPython's `PyGILState_Check` (not in the limited API's declarations of pyo3-ffi, but
    /// exported by every CPython 3): 1 when the calling thread holds the GIL, 0 otherwise (also
    /// on a thread Python does not know). Not to be trusted after finalization (CPython 3.12 and
    /// earlier answer 1 once their thread-state key is gone): `drop_detached` asks
    /// `Py_IsInitialized` first.
    fn PyGILState_Check() -> std::os::raw::c_int;
}

/// A Python callable as a host node's closure: called with the GIL taken, inside a
/// `HostCallableScope`; an exception is kept for the `HostCallbackError` and reported to the
/// crate as the closure's failure.
pub(crate) fn host_closure(callable: Py<PyAny>) -> impl Fn() + Send + Sync + 'static {
    move || {
        // Everything dropped on this thread meanwhile (by the callable, the garbage collector,
        // PyO3's deferred reference drops, an evicted host error) goes to the graveyard, and
        // calls that would wait for the GPU raise `ValidationError`: this is CUDA's host
        // function, where CUDA calls are forbidden.
        let _scope = HostCallableScope::enter();
        if python_exiting() {
            // Taking the GIL now may stop this thread inside CUDA's host function.
            std::panic::resume_unwind(Box::new(
                "the Python interpreter is shutting down: the host callable was not called"
                    .to_string(),
            ));
        }
        let failed = Python::with_gil(|py| match callable.call0(py) {
            Ok(_) => None,
            Err(err) => {
                let message = err.to_string();
                crate::errors::keep_host_error(message.clone(), err);
                Some(message)
            }
        });
        if let Some(message) = failed {
            // Caught by the crate's host node (it must not unwind into CUDA) and reported,
            // with the node's name, by the next launch or synchronize. `resume_unwind` runs
            // no panic hook: nothing is printed.
            std::panic::resume_unwind(Box::new(message));
        }
    }
}

/// Drops `value` with the GIL released: dropping a buffer, DAG or `Exec` may wait for the GPU
/// work that uses it, and that work may include a host node waiting for the GIL.
///
/// Inside a host callable the value is kept in the graveyard instead, freed at the next
/// launch, synchronize or drop outside one (CUDA calls are forbidden in a host function). The
/// GIL is released only when this thread holds it: this may run on any thread (a DLPack
/// consumer calls the deleter where it likes, even after the interpreter finalized: then it is
/// dropped with no call into Python at all), and the GIL is never taken just to release it.
pub(crate) fn drop_detached<T: Send + 'static>(value: T) {
    if in_host_callable() {
        let mut grave = GRAVEYARD.lock().unwrap_or_else(|p| p.into_inner());
        grave.push(Box::new(value));
        BURIED.store(true, Ordering::Release);
        return;
    }
    let drop_all = move || {
        drop(value);
        drain_graveyard();
    };
    // SAFETY: `Py_IsInitialized` may be called at any time, on any thread, even after
    // finalization (it reads a flag of the runtime).
    if unsafe { pyo3::ffi::Py_IsInitialized() } == 0 {
        drop_all();
        return;
    }
    // SAFETY: `PyGILState_Check` may be called on any thread of an initialized interpreter,
    // with or without the GIL.
    let holds_gil = unsafe { PyGILState_Check() } == 1;
    if holds_gil {
        // The GIL is held: `with_gil` only borrows it, and `allow_threads` releases it.
        Python::with_gil(|py| py.allow_threads(drop_all));
    } else {
        drop_all();
    }
}

/// One GPU (its primary context).
///
/// ``Device(0)`` opens the first GPU; without a GPU (or without the NVIDIA driver or the CUDA
/// 13 runtime) it raises ``NoGpuError``. DAGs are still built, validated, lowered and drawn
/// without one, against a ``RecordingBackend``.
#[pyclass(module = "cudagraph._cudagraph", name = "Device", frozen, eq)]
#[derive(Clone)]
pub(crate) struct PyDevice {
    pub(crate) inner: cudagraph::Device,
}

impl PartialEq for PyDevice {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

#[pymethods]
impl PyDevice {
    /// Opens GPU ``ordinal`` (``NoGpuError`` if there is none).
    #[new]
    #[pyo3(signature = (ordinal=0))]
    fn new(ordinal: usize) -> PyResult<Self> {
        refuse_in_host_callable("Device()")?;
        Ok(PyDevice {
            inner: open_device(ordinal)?,
        })
    }

    /// The number of GPUs (``NoGpuError`` when no driver or runtime is usable).
    #[staticmethod]
    fn count() -> PyResult<usize> {
        refuse_in_host_callable("Device.count()")?;
        cudagraph::Device::count().py_err()
    }

    /// The device's ordinal.
    #[getter]
    fn ordinal(&self) -> usize {
        self.inner.ordinal()
    }

    /// The device's name, e.g. ``NVIDIA H100 80GB HBM3``.
    #[getter]
    fn name(&self) -> String {
        self.inner.properties().name.clone()
    }

    /// ``(major, minor)`` compute capability.
    #[getter]
    fn compute_capability(&self) -> (u32, u32) {
        self.inner.limits().compute_capability
    }

    /// ``(free, total)`` device memory in bytes.
    fn memory_info(&self) -> PyResult<(usize, usize)> {
        refuse_in_host_callable("Device.memory_info()")?;
        self.inner.memory_info().py_err()
    }

    /// Waits for all work on the device (the GIL is released while waiting).
    /// Inside a host callable: ``ValidationError`` (it would wait for itself).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        refuse_in_host_callable("Device.synchronize()")?;
        let d = self.inner.clone();
        py.allow_threads(move || {
            let r = d.synchronize();
            drain_graveyard();
            r
        })
        .py_err()
    }

    fn __repr__(&self) -> String {
        format!("Device({}, '{}')", self.inner.ordinal(), self.name())
    }
}

/// A CUDA stream of a device (created non-blocking); destroyed with the last reference.
///
/// ``Exec.launch`` also takes another library's stream: any object with ``__cuda_stream__``
/// (cuda.core), a CuPy stream (``.ptr``) or a PyTorch stream (``.cuda_stream``).
#[pyclass(module = "cudagraph._cudagraph", name = "Stream", frozen)]
pub(crate) struct PyStream {
    pub(crate) inner: Option<Stream>,
}

impl Drop for PyStream {
    fn drop(&mut self) {
        if let Some(s) = self.inner.take() {
            drop_detached(s);
        }
    }
}

impl PyStream {
    pub(crate) fn stream(&self) -> &Stream {
        self.inner.as_ref().expect("taken only by Drop")
    }
}

#[pymethods]
impl PyStream {
    /// Creates a stream on ``device`` (``Device(0)`` when not given).
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(device: Option<PyRef<'_, PyDevice>>) -> PyResult<Self> {
        refuse_in_host_callable("Stream()")?;
        let device = match device {
            Some(d) => d.inner.clone(),
            None => open_device(0)?,
        };
        Ok(PyStream {
            inner: Some(Stream::new(&device).py_err()?),
        })
    }

    /// The raw ``cudaStream_t`` as an integer (valid while this object lives).
    #[getter]
    fn ptr(&self) -> usize {
        self.stream().raw() as usize
    }

    /// The cuda.core stream protocol: ``(0, handle)``.
    fn __cuda_stream__(&self) -> (u32, usize) {
        (0, self.ptr())
    }

    /// Waits for the work queued on the stream (the GIL is released while waiting).
    /// Inside a host callable: ``ValidationError`` (it would wait for itself).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        refuse_in_host_callable("Stream.synchronize()")?;
        let s = self.stream().clone();
        py.allow_threads(move || {
            let r = s.synchronize();
            drain_graveyard();
            r
        })
        .py_err()
    }

    fn __repr__(&self) -> String {
        format!("Stream({:#x})", self.ptr())
    }
}

/// A stand-in for GPUs, for building, validating and lowering DAGs without one.
///
/// Its ``device_buffer``, ``host_buffer`` and ``kernel`` make placeholders (no memory, no code);
/// ``Dag.lower(backend)`` records the CUDA calls that instantiating the DAG would make, readable
/// with ``calls()`` and ``transcript()``. A ``Dag(backend=...)`` wraps arrays exposing
/// ``__cuda_array_interface__`` as this backend's placeholders (holding a reference to them, as
/// a real DAG does).
#[pyclass(module = "cudagraph._cudagraph", name = "RecordingBackend", unsendable)]
pub(crate) struct PyRecordingBackend {
    pub(crate) inner: RecordingBackend,
}

#[pymethods]
impl PyRecordingBackend {
    /// A recording backend validating against an H100's limits.
    #[new]
    fn new() -> Self {
        PyRecordingBackend {
            inner: RecordingBackend::new(DeviceLimits::hopper()),
        }
    }

    /// A placeholder device buffer (no memory behind it).
    #[pyo3(signature = (shape, dtype=None))]
    fn device_buffer(
        slf: &Bound<'_, Self>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::buffers::PyDeviceBuffer> {
        let (shape, dtype, bytes) = crate::buffers::layout(shape, dtype)?;
        let buf =
            crate::typed::TypedBuffer::recording(&mut slf.borrow_mut().inner, dtype, bytes, None);
        Ok(crate::buffers::PyDeviceBuffer::new(
            buf,
            shape,
            dtype,
            Origin::Recording(slf.clone().unbind()),
        ))
    }

    /// A placeholder pinned host buffer.
    #[pyo3(signature = (shape, dtype=None))]
    fn host_buffer(
        slf: &Bound<'_, Self>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::buffers::PyHostBuffer> {
        let (shape, dtype, bytes) = crate::buffers::layout(shape, dtype)?;
        let buf = slf.borrow_mut().inner.host_buffer::<u8>(bytes);
        Ok(crate::buffers::PyHostBuffer::new(buf, shape, dtype))
    }

    /// A placeholder kernel named ``name`` whose parameters have these sizes in bytes (laid out
    /// with natural alignment), e.g. ``[8, 4, 4]`` for ``(float* x, float a, int n)``; with
    /// ``signature`` (``"float* x, float a, int n"``) the sizes are taken from the C types and
    /// plain Python numbers are accepted as arguments.
    #[pyo3(signature = (name, param_sizes=None, signature=None))]
    fn kernel(
        slf: &Bound<'_, Self>,
        name: &str,
        param_sizes: Option<Vec<usize>>,
        signature: Option<&str>,
    ) -> PyResult<crate::kernel::PyKernel> {
        let types = signature.map(crate::kernel::parse_params).transpose()?;
        let sizes = match (&param_sizes, &types) {
            (Some(s), _) => s.clone(),
            (None, Some(t)) => t
                .iter()
                .map(|p| {
                    p.size().ok_or_else(|| {
                        invalid(format!(
                            "parameter type `{}` has no known size: give param_sizes",
                            p.text
                        ))
                    })
                })
                .collect::<PyResult<_>>()?,
            (None, None) => return Err(invalid("give param_sizes or signature")),
        };
        let kernel = slf.borrow().inner.kernel(name, &sizes);
        crate::kernel::PyKernel::new(kernel, types, Origin::Recording(slf.clone().unbind()))
    }

    /// A placeholder event (a made-up handle, never passed to CUDA), for event record and
    /// wait nodes of DAGs lowered here; recording it on a stream or waiting for it is an error.
    fn event(&mut self) -> crate::graph_nodes::PyEvent {
        crate::graph_nodes::PyEvent::placeholder(self.inner.event())
    }

    /// A placeholder cuBLAS handle (no library loaded, never passed to cuBLAS), for GEMM nodes
    /// of DAGs lowered here.
    fn blas(slf: &Bound<'_, Self>) -> crate::gemm::PyBlas {
        let blas = slf.borrow_mut().inner.blas();
        crate::gemm::PyBlas::placeholder(blas, Origin::Recording(slf.clone().unbind()))
    }

    /// The recorded calls, one dict per call: ``function``, ``kind``, ``name``, ``deps``
    /// (indices of earlier calls) and ``params`` (words).
    fn calls<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        self.inner
            .calls()
            .iter()
            .map(|c| {
                let d = pyo3::types::PyDict::new(py);
                d.set_item("function", c.function)?;
                d.set_item("kind", c.kind)?;
                d.set_item("name", &c.name)?;
                d.set_item("deps", PyTuple::new(py, &c.deps)?)?;
                d.set_item("params", &c.params)?;
                Ok(d)
            })
            .collect()
    }

    /// The calls as text, one per line.
    fn transcript(&self) -> String {
        self.inner.transcript()
    }

    /// Forgets the recorded calls.
    fn clear(&mut self) {
        self.inner.clear()
    }
}

/// Where a buffer's memory, or a kernel, comes from: a GPU, or a recording backend.
pub(crate) enum Origin {
    Gpu(cudagraph::Device),
    Recording(Py<PyRecordingBackend>),
}

impl Clone for Origin {
    fn clone(&self) -> Self {
        match self {
            Origin::Gpu(d) => Origin::Gpu(d.clone()),
            Origin::Recording(r) => Python::with_gil(|py| Origin::Recording(r.clone_ref(py))),
        }
    }
}

impl Origin {
    /// The origin of an optional `Device` / `RecordingBackend` argument.
    pub(crate) fn from_arg(obj: &Bound<'_, PyAny>) -> PyResult<Origin> {
        if let Ok(d) = obj.downcast::<PyDevice>() {
            return Ok(Origin::Gpu(d.get().inner.clone()));
        }
        if let Ok(r) = obj.downcast::<PyRecordingBackend>() {
            return Ok(Origin::Recording(r.clone().unbind()));
        }
        Err(pyo3::exceptions::PyTypeError::new_err(
            "expected a cudagraph.Device or a cudagraph.RecordingBackend",
        ))
    }

    /// `Device(0)`, for calls given no device.
    pub(crate) fn default_gpu() -> PyResult<Origin> {
        Ok(Origin::Gpu(open_device(0)?))
    }
}
