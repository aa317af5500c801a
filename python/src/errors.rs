//! The exception hierarchy and the mapping from the crate's typed [`cudagraph::Error`].

use std::collections::VecDeque;
use std::sync::Mutex;

use cudagraph::{Error, Library};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _cudagraph,
    CudaGraphError,
    PyException,
    "Base class of every error cudagraph raises."
);
create_exception!(
    _cudagraph,
    ValidationError,
    CudaGraphError,
    "A DAG, node, kernel argument, launch shape, copy or memset that cannot be valid; the \
     message names the node (`kernel#3`, or the name given) and what is wrong. Raised before \
     CUDA sees the graph."
);
create_exception!(
    _cudagraph,
    CudaError,
    CudaGraphError,
    "A CUDA runtime, driver, NVRTC, cuFFT, cuBLAS or NCCL call failed; the message names the \
     call and CUDA's error."
);
create_exception!(
    _cudagraph,
    CompileError,
    CudaGraphError,
    "NVRTC rejected a kernel's source; the message holds the compiler's log."
);
create_exception!(
    _cudagraph,
    NoGpuError,
    CudaGraphError,
    "No GPU was found: no NVIDIA driver, no CUDA 13 runtime, a driver too old, or no such \
     device. DAGs can still be built, validated, lowered and drawn against a \
     `RecordingBackend`."
);
create_exception!(
    _cudagraph,
    LibraryError,
    CudaGraphError,
    "A CUDA library other than the runtime and driver (NVRTC, cuFFT, nvJitLink, cuBLAS, NCCL) \
     could not be loaded, or is too old; the message says what to install."
);
create_exception!(
    _cudagraph,
    HostCallbackError,
    CudaGraphError,
    "A Python callable of a host node raised while a graph ran. Reported by the next \
     `Exec.launch` or `Exec.synchronize` (never lost); the callable's exception is the \
     `__cause__`, and the message names the host node."
);
create_exception!(
    _cudagraph,
    UpdateRefusedError,
    ValidationError,
    "An in-place update of an `Exec` was refused (the DAG does not match the one instantiated, \
     or CUDA refused it); the message names the node when one is to blame. Instantiate again."
);

/// Exceptions raised by host callables, kept until the crate reports the host node's failure
/// (by its message) so that the Python exception becomes the `HostCallbackError`'s cause.
/// Bounded: a failure whose `Exec` is dropped before reporting it leaves an entry here.
static HOST_ERRORS: Mutex<VecDeque<(String, PyErr)>> = Mutex::new(VecDeque::new());
const HOST_ERRORS_KEPT: usize = 64;

/// Keeps `err`, raised by a host callable, under `message` (the text the crate reports). The
/// crate keeps a closure's latest failure only, so an earlier exception of the same text is
/// replaced (it would never be taken, and its traceback holds frames and what they reference).
pub(crate) fn keep_host_error(message: String, err: PyErr) {
    let mut q = HOST_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
    q.retain(|(m, _)| *m != message);
    if q.len() == HOST_ERRORS_KEPT {
        q.pop_front();
    }
    q.push_back((message, err));
}

fn take_host_error(message: &str) -> Option<PyErr> {
    let mut q = HOST_ERRORS.lock().unwrap_or_else(|p| p.into_inner());
    let i = q.iter().rposition(|(m, _)| m == message)?;
    q.remove(i).map(|(_, e)| e)
}

/// The number of host-callable exceptions kept (for tests).
#[pyfunction]
pub(crate) fn _host_errors_len() -> usize {
    HOST_ERRORS.lock().unwrap_or_else(|p| p.into_inner()).len()
}

/// Whether a library's absence means that there is no GPU to use.
fn means_no_gpu(library: Library) -> bool {
    matches!(library, Library::Cudart | Library::Driver)
}

/// The Python exception for a crate error.
pub(crate) fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::NoDevice(_) => NoGpuError::new_err(format!("no GPU was found: {msg}")),
        Error::LibraryNotFound { library, .. } | Error::MissingSymbol { library, .. }
            if means_no_gpu(library) =>
        {
            NoGpuError::new_err(format!("no GPU was found: {msg}"))
        }
        Error::TooOld { what, .. } if what.contains("driver") || what.contains("runtime") => {
            NoGpuError::new_err(format!("no GPU was found: {msg}"))
        }
        Error::LibraryNotFound { .. } | Error::MissingSymbol { .. } | Error::TooOld { .. } => {
            LibraryError::new_err(msg)
        }
        Error::Dag(_)
        | Error::KernelArgs { .. }
        | Error::LaunchShape { .. }
        | Error::OutOfBounds { .. }
        | Error::WrongDevice { .. }
        | Error::Placeholder { .. }
        | Error::FftPlan { .. }
        | Error::BadOptions { .. }
        | Error::InHostNode { .. }
        | Error::InsideHelper { .. } => ValidationError::new_err(msg),
        Error::UpdateRefused { .. } => UpdateRefusedError::new_err(msg),
        Error::Compile { .. } => CompileError::new_err(msg),
        Error::Cuda { .. }
        | Error::Cufft { .. }
        | Error::Cublas { .. }
        | Error::Nvrtc { .. }
        | Error::Nccl { .. } => CudaError::new_err(msg),
        Error::HostNodePanicked { node, message } => {
            let err = HostCallbackError::new_err(format!(
                "host node `{node}`: its callable raised {message}"
            ));
            if let Some(cause) = take_host_error(&message) {
                Python::with_gil(|py| err.set_cause(py, Some(cause)));
            }
            err
        }
        // The crate's advice names its Rust call; Python's way is the environment at start.
        Error::BadEnv {
            variable: "NCCL_NVLS_ENABLE",
            value: None,
            ..
        } => CudaGraphError::new_err(
            "NCCL_NVLS_ENABLE is unset: it must be set before NCCL is loaded (NVLink multicast \
             must be off: 0). Start Python with NCCL_NVLS_ENABLE=0 in its environment, or set \
             os.environ[\"NCCL_NVLS_ENABLE\"] = \"0\" at the top of the program, before CUDA \
             or any thread is started",
        ),
        _ => CudaGraphError::new_err(msg),
    }
}

/// `?` on crate results inside `#[pymethods]`.
pub(crate) trait IntoPy<T> {
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for cudagraph::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `ValidationError` with this message.
pub(crate) fn invalid(msg: impl Into<String>) -> PyErr {
    ValidationError::new_err(msg.into())
}

/// Adds the exception classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("CudaGraphError", py.get_type::<CudaGraphError>())?;
    m.add("ValidationError", py.get_type::<ValidationError>())?;
    m.add("UpdateRefusedError", py.get_type::<UpdateRefusedError>())?;
    m.add("CudaError", py.get_type::<CudaError>())?;
    m.add("CompileError", py.get_type::<CompileError>())?;
    m.add("NoGpuError", py.get_type::<NoGpuError>())?;
    m.add("LibraryError", py.get_type::<LibraryError>())?;
    m.add("HostCallbackError", py.get_type::<HostCallbackError>())?;
    Ok(())
}
