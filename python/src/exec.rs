//! `Exec`: an instantiated graph, and the streams it launches on.

use std::collections::HashMap;
use std::sync::Mutex;

use cudagraph::{Exec, Stream};
use pyo3::prelude::*;

use crate::dag::{PyDag, PyNode};
use crate::device::{drain_graveyard, drop_detached, refuse_in_host_callable, PyStream};
use crate::errors::{invalid, IntoPy};
use crate::graph_nodes::PyEvent;
use crate::kernel::{as_args, prepare_args, KernelInfo};

/// A DAG instantiated as a CUDA graph: launch it many times, update it between launches.
///
/// ``launch``, ``synchronize`` and the ``set_*`` updates release the GIL while they wait, so
/// host nodes (which take it) can run. Dropping an ``Exec`` waits for its queued launches.
/// It may be used from any thread (one call at a time: a second thread's call while one runs
/// raises ``RuntimeError``, already borrowed). A foreign array's CAI ``stream``
/// given to ``set_kernel_arg(s)`` / ``set_fft_params`` is synchronised then, not at launch.
#[pyclass(module = "cudagraph._cudagraph", name = "Exec")]
pub(crate) struct PyExec {
    /// The `Exec` (`None` once dropped). In a `Mutex` because a class used from any thread
    /// must be `Sync` and an `Exec` is not; methods reach it through `&mut self` (PyO3's
    /// exclusive borrow) with `get_mut`, which takes no lock.
    inner: Mutex<Option<Exec>>,
    device: cudagraph::Device,
    /// The DAGs whose nodes are accepted: the one it was made from and the last one it was
    /// updated from (built the same way, so their nodes are the same indices). Two at most: a
    /// pipeline that updates from a new DAG at every block must not grow it.
    pub(crate) dags: Vec<u64>,
    kernels: HashMap<usize, KernelInfo>,
    /// The plan of each FFT node (by node index).
    ffts: HashMap<usize, Py<crate::fft::PyFftPlan>>,
    /// Foreign arrays given to `set_fft_params` are wrapped as a DAG for this device would.
    wrap: PyDag,
    /// The stream `launch()` uses when given none (made at the first such launch).
    own_stream: Option<Stream>,
    /// The last foreign stream launched on: the object's address, its handle, and the stream
    /// wrapped once (holding the Python object, so neither the address nor the handle can be
    /// reused while kept). The same object again is recognised by its address alone, without
    /// the protocol's attribute lookups (about a microsecond a launch).
    foreign: Option<(usize, usize, Stream)>,
}

impl Drop for PyExec {
    fn drop(&mut self) {
        // A host callable's exception from the last launches would go with the `Exec`: its
        // launches are waited for here (the GIL released) and a failure is written as an
        // unraisable exception (`sys.unraisablehook`). Not inside a host callable (no waits
        // there: the graveyard takes the `Exec`), nor once the interpreter is exiting.
        if let Some(exec) = self.inner.get_mut().unwrap_or_else(|p| p.into_inner()) {
            if !crate::device::in_host_callable() && !crate::device::python_exiting() {
                Python::with_gil(|py| {
                    if let Err(e) = py.allow_threads(|| exec.synchronize()) {
                        crate::errors::to_py(e).write_unraisable(py, None);
                    }
                });
            }
        }
        let (e, s, f) = (
            self.inner
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
            self.own_stream.take(),
            self.foreign.take(),
        );
        drop_detached((e, s, f));
    }
}

impl PyExec {
    pub(crate) fn new(exec: Exec, device: cudagraph::Device, dag: &PyDag) -> Self {
        let wrap = PyDag::for_device(&device);
        PyExec {
            inner: Mutex::new(Some(exec)),
            device,
            dags: vec![dag.id],
            kernels: dag.kernels.clone(),
            ffts: Python::with_gil(|py| {
                dag.ffts
                    .iter()
                    .map(|(k, v)| (*k, v.clone_ref(py)))
                    .collect()
            }),
            wrap,
            own_stream: None,
            foreign: None,
        }
    }

    pub(crate) fn exec(&mut self) -> &mut Exec {
        self.inner
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
            .expect("taken only by Drop")
    }

    fn node_id(&self, node: &PyNode) -> PyResult<cudagraph::NodeId> {
        if !self.dags.contains(&node.dag) {
            return Err(invalid(format!(
                "Node({}) belongs to another DAG than the one this Exec was made from or the \
                 last one it was updated from",
                node.id.index()
            )));
        }
        Ok(node.id)
    }

    /// The stream to launch on: ours, a cudagraph `Stream`, or another library's.
    pub(crate) fn stream(&mut self, stream: Option<&Bound<'_, PyAny>>) -> PyResult<Stream> {
        let Some(obj) = stream else {
            if self.own_stream.is_none() {
                self.own_stream = Some(Stream::new(&self.device).py_err()?);
            }
            return Ok(self.own_stream.clone().expect("set above"));
        };
        if let Ok(s) = obj.downcast::<PyStream>() {
            return Ok(s.get().stream().clone());
        }
        let addr = obj.as_ptr() as usize;
        if let Some((a, _, s)) = &self.foreign {
            // The object the cached stream holds (alive, so no other object has its
            // address): its handle and device were read and checked when it was cached.
            if *a == addr {
                return Ok(s.clone());
            }
        }
        let raw = foreign_stream_handle(obj)?;
        // The device first, also for a cached handle: PyTorch's default streams are handle 0
        // on every device.
        check_stream_device(obj, &self.device, "the Exec")?;
        if let Some((_, r, s)) = &self.foreign {
            // Another object of the same stream (PyTorch makes a new `Stream` object for each
            // `current_stream()`). Not remembered by its address: the cached stream holds the
            // first object, not this one, whose address may be reused once it is gone.
            if *r == raw {
                return Ok(s.clone());
            }
        }
        let s = foreign_stream(obj, raw, &self.device, "the Exec")?;
        self.foreign = Some((addr, raw, s.clone()));
        Ok(s)
    }
}

/// Another library's stream `obj` (whose handle is `raw`, from [`foreign_stream_handle`]) as a
/// stream of `device`, holding the object; `of` names what `device` is of, in errors.
pub(crate) fn foreign_stream(
    obj: &Bound<'_, PyAny>,
    raw: usize,
    device: &cudagraph::Device,
    of: &str,
) -> PyResult<Stream> {
    check_stream_device(obj, device, of)?;
    let owner: cudagraph::ForeignOwner = Box::new(obj.clone().unbind());
    // SAFETY: `raw` is the stream handle the object gives through its protocol
    // (`__cuda_stream__`, `.ptr` of a CuPy stream, `.cuda_stream` of a PyTorch stream; their
    // `ExternalStream`s, which own no stream, were refused by `foreign_stream_handle`), valid
    // while the object lives, which `owner` holds (an object implementing `__cuda_stream__`
    // over a handle it does not keep breaks the protocol, the caller's contract in
    // python/README.md); those libraries make their streams in the CUDA runtime's
    // primary context of the stream's device, and the device the object states was checked
    // against `device` above (a stream of another device that says nothing is refused by CUDA
    // at its first use as a handle of another context: an error, not a use of freed memory).
    unsafe { Stream::from_foreign(device, raw as cudagraph::sys::cudaStream_t, owner) }.py_err()
}

/// The handle of another library's stream: `__cuda_stream__()` (cuda.core: `(version,
/// handle)`), `.cuda_stream` of a PyTorch stream, `.ptr` of a CuPy stream. Only objects that
/// keep their stream alive are taken: a plain int is refused (nothing would keep the stream it
/// names alive), so are the `ExternalStream`s of CuPy and PyTorch (a handle they do not own)
/// and `.ptr` / `.cuda_stream` of other objects (a CuPy event or memory pointer has a `.ptr`
/// too, which is no stream).
pub(crate) fn foreign_stream_handle(obj: &Bound<'_, PyAny>) -> PyResult<usize> {
    if obj.is_instance_of::<pyo3::types::PyInt>() {
        return Err(invalid(
            "a plain int is not taken as a stream: a raw stream handle keeps nothing alive; \
             pass the stream object (a cudagraph.Stream, an object with __cuda_stream__, a CuPy \
             or PyTorch stream)",
        ));
    }
    let ty = obj.get_type();
    let name = ty.name().map(|n| n.to_string()).unwrap_or_default();
    let module = ty.module().map(|m| m.to_string()).unwrap_or_default();
    let library = module.split('.').next().unwrap_or_default();
    if name == "ExternalStream" && matches!(library, "cupy" | "torch") {
        return Err(invalid(format!(
            "a {module}.ExternalStream is not taken as a stream: it wraps a handle it does not \
             own, which nothing keeps alive while a launch uses it; pass the stream object that \
             owns it ({library}'s Stream), or a cudagraph.Stream"
        )));
    }
    if obj.hasattr("__cuda_stream__")? {
        let (_, raw): (usize, usize) = obj
            .call_method0("__cuda_stream__")?
            .extract()
            .map_err(|_| invalid("__cuda_stream__() must return (version, handle)"))?;
        return Ok(raw);
    }
    // A stream class of the library (`cupy.cuda.Stream`, `torch.cuda.Stream`): other objects
    // of theirs have such attributes too (a CuPy event's or memory pointer's `.ptr`).
    let attr = match library {
        "torch" if name.ends_with("Stream") => Some("cuda_stream"),
        "cupy" if name.ends_with("Stream") => Some("ptr"),
        _ => None,
    };
    if let Some(attr) = attr {
        if let Ok(raw) = obj.getattr(attr).and_then(|v| v.extract::<usize>()) {
            return Ok(raw);
        }
    }
    let what = if module == "builtins" {
        name
    } else {
        format!("{module}.{name}")
    };
    Err(invalid(format!(
        "a {what} is not a stream: expected a cudagraph.Stream, an object with \
         __cuda_stream__, a CuPy stream or a PyTorch stream"
    )))
}

/// An error when another library's stream says it is on another device than `device` (of
/// `of`, in the message).
fn check_stream_device(
    obj: &Bound<'_, PyAny>,
    device: &cudagraph::Device,
    of: &str,
) -> PyResult<()> {
    match foreign_stream_device(obj) {
        Some(d) if d != device.ordinal() => Err(invalid(format!(
            "the stream is on device {d} but {of} is on device {}",
            device.ordinal()
        ))),
        _ => Ok(()),
    }
}

/// The device another library's stream says it is on: PyTorch's `.device_index`, CuPy's
/// `.device_id`, cuda.core's `.device.device_id`; `None` when it says nothing.
fn foreign_stream_device(obj: &Bound<'_, PyAny>) -> Option<usize> {
    let int = |v: PyResult<Bound<'_, PyAny>>| v.ok().and_then(|v| v.extract::<usize>().ok());
    int(obj.getattr("device_index"))
        .or_else(|| int(obj.getattr("device_id")))
        .or_else(|| int(obj.getattr("device").and_then(|d| d.getattr("device_id"))))
}

#[pymethods]
impl PyExec {
    /// Queues one launch on ``stream`` (a cudagraph ``Stream``, an object with
    /// ``__cuda_stream__``, a CuPy or PyTorch stream; the ``Exec``'s own stream when not
    /// given) and returns without waiting for it. Reports a host callable's exception from an
    /// earlier launch (``HostCallbackError``).
    #[pyo3(signature = (stream=None))]
    fn launch(&mut self, py: Python<'_>, stream: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        refuse_in_host_callable("Exec.launch()")?;
        let s = self.stream(stream)?;
        let exec = self.exec();
        py.allow_threads(|| {
            drain_graveyard();
            exec.launch(&s)
        })
        .py_err()
    }

    /// Waits for every queued launch (the GIL is released meanwhile); reports a host
    /// callable's exception (``HostCallbackError``).
    fn synchronize(&mut self, py: Python<'_>) -> PyResult<()> {
        refuse_in_host_callable("Exec.synchronize()")?;
        let exec = self.exec();
        py.allow_threads(|| {
            let r = exec.synchronize();
            drain_graveyard();
            r
        })
        .py_err()
    }

    /// Replaces all arguments of kernel node ``node`` for the next launches (converted and
    /// checked as in ``Dag.add_kernel``), in place: no new instantiation. The GIL is released
    /// while the crate updates the node (it may wait for earlier launches).
    fn set_kernel_args(
        &mut self,
        py: Python<'_>,
        node: PyRef<'_, PyNode>,
        args: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = self.node_id(&node)?;
        let info = self
            .kernels
            .get(&id.index())
            .cloned()
            .ok_or_else(|| invalid(format!("Node({}) is not a kernel node", id.index())))?;
        refuse_in_host_callable("Exec.set_kernel_args()")?;
        let prepared = prepare_args(&info, args)?;
        drop(node);
        let exec = self.exec();
        // Released: the crate takes the buffers' use-list locks and the stream's, and waits for
        // the oldest launch when too many replaced arguments are pending; the work waited for
        // may contain a host node that needs the GIL.
        py.allow_threads(|| exec.set_kernel_args(id, &as_args(&prepared)))
            .py_err()
    }

    /// Replaces argument ``index`` of kernel node ``node`` for the next launches.
    fn set_kernel_arg(
        &mut self,
        py: Python<'_>,
        node: PyRef<'_, PyNode>,
        index: usize,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let id = self.node_id(&node)?;
        let info = self
            .kernels
            .get(&id.index())
            .ok_or_else(|| invalid(format!("Node({}) is not a kernel node", id.index())))?;
        let at = format!("kernel `{}` argument {index}", info.name);
        // Converted as parameter `index` (its C type, when known).
        let param = match &info.types {
            Some(t) => Some(t.get(index).ok_or_else(|| {
                invalid(format!(
                    "{at}: the kernel has {} parameters (index out of range)",
                    t.len()
                ))
            })?),
            None => None,
        };
        refuse_in_host_callable("Exec.set_kernel_arg()")?;
        let prepared = [crate::kernel::prepare_one(value, param, info, &at)?];
        drop(node);
        let exec = self.exec();
        // Released, as in `set_kernel_args`.
        py.allow_threads(|| {
            let arg = as_args(&prepared).pop().expect("one argument");
            exec.set_kernel_arg(id, index, arg)
        })
        .py_err()
    }

    /// Enables or disables ``node`` for the next launches (a disabled node does nothing).
    fn set_enabled(&mut self, node: PyRef<'_, PyNode>, enabled: bool) -> PyResult<()> {
        refuse_in_host_callable("Exec.set_enabled()")?;
        let id = self.node_id(&node)?;
        self.exec().set_enabled(id, enabled).py_err()
    }

    /// Updates the whole graph from ``dag``, built the same way (same nodes and edges; other
    /// parameters), without instantiating again. ``UpdateRefusedError`` when the topology
    /// differs or CUDA refuses (also for graphs with graph-memory or device-updatable nodes);
    /// the ``Exec`` is unchanged then. Captured nodes' callables are called again (lowering).
    fn update(&mut self, py: Python<'_>, dag: PyRef<'_, PyDag>) -> PyResult<()> {
        refuse_in_host_callable("Exec.update()")?;
        let d = dag.dag();
        let exec = self.exec();
        crate::captured::clear_capture_error();
        py.allow_threads(|| exec.update(d))
            .py_err()
            .map_err(|e| crate::captured::with_capture_cause(py, e))?;
        // The original DAG's and the latest DAG's nodes stay accepted.
        self.dags.truncate(1);
        if self.dags[0] != dag.id {
            self.dags.push(dag.id);
        }
        self.kernels = dag.kernels.clone();
        self.ffts = dag
            .ffts
            .iter()
            .map(|(k, v)| (*k, v.clone_ref(py)))
            .collect();
        Ok(())
    }

    /// Replaces the callback parameters of FFT node ``node`` for the launches queued after
    /// this call (``load_scale``, ``load_input``, ``store_scale``, ``store_output``,
    /// ``accumulate`` as in ``Dag.add_fft``); launches already queued keep theirs. Buffers the
    /// old parameters named stay alive until those launches have completed.
    #[pyo3(signature = (node, load_scale=None, load_input=None, store_scale=None, store_output=None, accumulate=false))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn set_fft_params(
        &mut self,
        py: Python<'_>,
        node: PyRef<'_, PyNode>,
        load_scale: Option<f32>,
        load_input: Option<&Bound<'_, PyAny>>,
        store_scale: Option<f32>,
        store_output: Option<&Bound<'_, PyAny>>,
        accumulate: bool,
    ) -> PyResult<()> {
        refuse_in_host_callable("Exec.set_fft_params()")?;
        let id = self.node_id(&node)?;
        let plan = self
            .ffts
            .get(&id.index())
            .map(|p| p.clone_ref(py))
            .ok_or_else(|| invalid(format!("Node({}) is not an FFT node", id.index())))?;
        let li = load_input
            .map(|b| {
                self.wrap
                    .region(b, None, "FFT load_input", false)
                    .map(|r| r.0)
            })
            .transpose()?;
        let so = store_output
            .map(|b| {
                self.wrap
                    .region(b, None, "FFT store_output", true)
                    .map(|r| r.0)
            })
            .transpose()?;
        let params = crate::fft::params(plan.get(), load_scale, li, store_scale, so, accumulate);
        drop(node);
        let exec = self.exec();
        // Released, as in `set_kernel_args` (the replaced buffers may be freed here).
        py.allow_threads(|| exec.set_fft_params(id, params))
            .py_err()
    }

    /// Replaces the event of event record or wait node ``node`` for the next launches; the
    /// new ``Event`` must be on the device of the one it replaces. The event replaced lives
    /// until the launches that may use it have completed. When CUDA refuses, nothing changes.
    fn set_event(
        &mut self,
        py: Python<'_>,
        node: PyRef<'_, PyNode>,
        event: PyRef<'_, PyEvent>,
    ) -> PyResult<()> {
        refuse_in_host_callable("Exec.set_event()")?;
        let id = self.node_id(&node)?;
        let e = event.event().clone();
        drop((node, event));
        let exec = self.exec();
        // Released, as in `set_kernel_args` (the replaced event may be retired here).
        py.allow_threads(|| exec.set_event(id, &e)).py_err()
    }

    /// The graph this ``Exec`` runs (its DAG, as updated) in Graphviz DOT.
    fn to_dot(&self) -> String {
        // Uncontended: PyO3's borrow of this object excludes the `&mut self` methods.
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .expect("taken only by Drop")
            .to_dot()
    }
}
