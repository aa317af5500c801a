//! Captured nodes: a Python callable that enqueues work on the stream it is given, recorded
//! into the graph at every lowering (`Dag.add_captured`), and the stream object it is given.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use cudagraph::CaptureStream;
use pyo3::prelude::*;

use crate::errors::invalid;

thread_local! {
    /// The exception a capture callable raised on this thread, kept until the lowering that
    /// called it returns (it runs on the lowering's thread: capture is thread-local), to become
    /// the cause of the error raised then.
    static CAPTURE_ERROR: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// The stream a captured node's callable enqueues its work on, while CUDA records that work
/// into the graph instead of running it. Valid only during the call it is given to: afterwards
/// ``ptr`` and ``__cuda_stream__`` raise ``ValidationError``.
///
/// Pass it to other libraries as their stream: ``cupy.cuda.ExternalStream(s.ptr)``,
/// ``torch.cuda.ExternalStream(s.ptr)``, or any API taking ``__cuda_stream__``.
#[pyclass(module = "cudagraph._cudagraph", name = "CaptureStream", frozen)]
pub(crate) struct PyCaptureStream {
    raw: usize,
    live: AtomicBool,
}

impl PyCaptureStream {
    fn handle(&self) -> PyResult<usize> {
        if !self.live.load(Ordering::Acquire) {
            return Err(invalid(
                "this CaptureStream was given to a captured node's callable, whose call has \
                 returned: the stream is no longer capturing (use it only during the call)",
            ));
        }
        Ok(self.raw)
    }
}

#[pymethods]
impl PyCaptureStream {
    /// The raw ``cudaStream_t`` as an integer (during the call only).
    #[getter]
    fn ptr(&self) -> PyResult<usize> {
        self.handle()
    }

    /// The cuda.core stream protocol: ``(0, handle)`` (during the call only).
    fn __cuda_stream__(&self) -> PyResult<(u32, usize)> {
        Ok((0, self.handle()?))
    }

    fn __repr__(&self) -> String {
        if self.live.load(Ordering::Acquire) {
            format!("CaptureStream({:#x}, capturing)", self.raw)
        } else {
            "CaptureStream(ended)".to_string()
        }
    }
}

/// A Python callable as a captured node's work: called with the GIL taken and a
/// `CaptureStream`, inside a `HostCallableScope` (what it drops is freed later, and cudagraph
/// calls that would wait for the GPU raise `ValidationError`: a wait would end the capture).
/// An exception is kept for the lowering's error (`with_capture_cause`) and reported to the
/// crate as the work's failure, which ends the capture and fails the lowering.
pub(crate) fn capture_closure(
    what: String,
    callable: Py<PyAny>,
) -> impl Fn(&CaptureStream<'_>) -> cudagraph::Result<()> + Send + Sync + 'static {
    move |stream| {
        let _scope = crate::device::HostCallableScope::enter();
        Python::with_gil(|py| {
            let s = Py::new(
                py,
                PyCaptureStream {
                    raw: stream.raw() as usize,
                    live: AtomicBool::new(true),
                },
            );
            let result = s.and_then(|s| {
                let r = callable.call1(py, (s.clone_ref(py),));
                s.get().live.store(false, Ordering::Release);
                r
            });
            match result {
                Ok(_) => Ok(()),
                Err(err) => {
                    let message = err.to_string();
                    CAPTURE_ERROR.with(|e| *e.borrow_mut() = Some(err));
                    Err(cudagraph::Error::Invalid(format!(
                        "captured work `{what}`: the callable raised {message}"
                    )))
                }
            }
        })
    }
}

/// Forgets an exception kept from an earlier lowering (call before lowering).
pub(crate) fn clear_capture_error() {
    CAPTURE_ERROR.with(|e| e.borrow_mut().take());
}

/// `err` (a lowering's error) with the exception a capture callable raised during that
/// lowering as its cause, if one did.
pub(crate) fn with_capture_cause(py: Python<'_>, err: PyErr) -> PyErr {
    if let Some(cause) = CAPTURE_ERROR.with(|e| e.borrow_mut().take()) {
        err.set_cause(py, Some(cause));
    }
    err
}
