//! `Dag` and `Node`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use cudagraph::{
    AccessPolicy, AccessProperty, Dag, InstantiateFlags, LaunchAttributes, LaunchConfig,
    MemSyncDomain, MemsetValue, NodeId, ProgrammaticPort, Region,
};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::buffers::{foreign_buffer, is_foreign_device_array, PyDeviceBuffer, PyHostBuffer};
use crate::device::{drop_detached, refuse_in_host_callable, Origin, PyDevice, PyRecordingBackend};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};
use crate::exec::PyExec;
use crate::graph_nodes::{
    each_graph_buf, GraphBuf, PyConditional, PyDeviceNode, PyEvent, PyGraphBuffer,
};
use crate::kernel::{as_args, prepare_args, KernelInfo, PyKernel};

static NEXT_DAG: AtomicU64 = AtomicU64::new(1);

/// A node of a ``Dag``: returned by the ``add_*`` methods and passed to ``chain``,
/// ``add_dependency``, ``set_name`` and the ``Exec``'s per-node updates. Valid only for the
/// DAG that made it (and ``Exec``s instantiated from it).
#[pyclass(module = "cudagraph._cudagraph", name = "Node", frozen, eq, hash)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct PyNode {
    pub(crate) id: NodeId,
    pub(crate) dag: u64,
}

#[pymethods]
impl PyNode {
    /// The node's index in its DAG.
    #[getter]
    fn index(&self) -> usize {
        self.id.index()
    }

    fn __repr__(&self) -> String {
        format!("Node({})", self.id.index())
    }
}

/// One dimension or a tuple of up to three.
fn dim3(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<(u32, u32, u32)> {
    if let Ok(x) = obj.extract::<u32>() {
        return Ok((x, 1, 1));
    }
    let v: Vec<u32> = obj
        .extract()
        .map_err(|_| invalid(format!("{what} must be an int or a tuple of 1 to 3 ints")))?;
    match v.as_slice() {
        [x] => Ok((*x, 1, 1)),
        [x, y] => Ok((*x, *y, 1)),
        [x, y, z] => Ok((*x, *y, *z)),
        _ => Err(invalid(format!("{what} must have 1 to 3 dimensions"))),
    }
}

/// A DAG of GPU work, built explicitly: each ``add_*`` adds a node (checked at once: argument
/// sizes and types, launch shapes, copy bounds) and returns it; ``chain`` and
/// ``add_dependency`` add edges (a cycle is refused). ``to_dot()`` draws it;
/// ``instantiate(device)`` lowers it to a CUDA graph and returns an ``Exec`` to launch.
///
/// ``backend`` (a ``Device`` or a ``RecordingBackend``) is where arrays from other libraries
/// (``__cuda_array_interface__``) given to copy, memset and FFT nodes live; kernel nodes use
/// their kernel's. When not given, the device of a cudagraph buffer among the operands, else
/// ``Device(0)``.
///
/// Every buffer a node uses is kept alive (a reference held) while the DAG, or an ``Exec``
/// made from it, may use it. For an array of another library, that is a reference to the
/// array object: a producer reallocating under it (PyTorch's ``resize_``, ``set_``,
/// ``.data =``) frees memory the graph uses, and is the caller's to avoid. Its CAI ``stream``
/// is synchronised when the node is added, not at each launch.
///
/// It may be built and used from any thread (one call at a time: a second thread's call while
/// one runs raises ``RuntimeError``, already borrowed).
#[pyclass(module = "cudagraph._cudagraph", name = "Dag")]
pub(crate) struct PyDag {
    pub(crate) inner: Option<Dag>,
    pub(crate) id: u64,
    pub(crate) backend: Option<Origin>,
    /// The kernel of each kernel node (by node index), for argument conversion.
    pub(crate) kernels: HashMap<usize, KernelInfo>,
    /// The plan of each FFT node (by node index), for `Exec.set_fft_params`.
    pub(crate) ffts: HashMap<usize, Py<crate::fft::PyFftPlan>>,
}

impl Drop for PyDag {
    fn drop(&mut self) {
        if let Some(d) = self.inner.take() {
            drop_detached(d);
        }
    }
}

impl PyDag {
    /// An empty DAG whose foreign arrays are wrapped for `device`.
    pub(crate) fn for_device(device: &cudagraph::Device) -> PyDag {
        PyDag {
            inner: Some(Dag::new()),
            id: NEXT_DAG.fetch_add(1, Ordering::Relaxed),
            backend: Some(Origin::Gpu(device.clone())),
            kernels: HashMap::new(),
            ffts: HashMap::new(),
        }
    }

    pub(crate) fn dag(&self) -> &Dag {
        self.inner.as_ref().expect("taken only by Drop")
    }

    pub(crate) fn dag_mut(&mut self) -> &mut Dag {
        self.inner.as_mut().expect("taken only by Drop")
    }

    pub(crate) fn node_id(&self, node: &PyNode) -> PyResult<NodeId> {
        if node.dag != self.id {
            return Err(invalid(format!(
                "{} belongs to another DAG",
                node.__repr__()
            )));
        }
        Ok(node.id)
    }

    pub(crate) fn node(&self, id: NodeId) -> PyNode {
        PyNode { id, dag: self.id }
    }

    pub(crate) fn named(&mut self, id: NodeId, name: Option<String>) -> PyNode {
        if let Some(n) = name {
            self.dag_mut().set_name(id, n);
        }
        self.node(id)
    }

    /// A copy, memset or FFT operand as a region; `hint` is the origin of a cudagraph operand
    /// of the same node, for wrapping foreign arrays; `writes` when the node writes it (a
    /// read-only foreign array is refused then).
    pub(crate) fn region(
        &self,
        obj: &Bound<'_, PyAny>,
        hint: Option<&Origin>,
        what: &str,
        writes: bool,
    ) -> PyResult<(Region, Option<Dtype>)> {
        if let Ok(b) = obj.downcast::<PyDeviceBuffer>() {
            let b = b.get();
            return Ok((b.buf().region(), Some(b.dtype)));
        }
        if let Ok(h) = obj.downcast::<PyHostBuffer>() {
            let h = h.get();
            return Ok((h.region(), Some(h.dtype)));
        }
        if is_foreign_device_array(obj)? {
            let origin = match (&self.backend, hint) {
                (Some(o), _) => o.clone(),
                (None, Some(o)) => o.clone(),
                (None, None) => Origin::default_gpu()?,
            };
            let (buf, a) = foreign_buffer(obj, &origin, what)?;
            if writes && a.readonly {
                return Err(invalid(format!(
                    "{what}: the array is read-only (its producer says so), and \
                     the node writes it"
                )));
            }
            return Ok((buf.region(), Some(a.dtype)));
        }
        if obj.hasattr("__array_interface__")? || obj.hasattr("__buffer__")? {
            return Err(invalid(format!(
                "{what}: pageable host memory (a NumPy array) cannot be a copy node's end; use \
                 a pinned cudagraph.HostBuffer (HostBuffer.from_numpy(array))"
            )));
        }
        Err(invalid(format!(
            "{what}: expected a DeviceBuffer, a HostBuffer or an array with \
             __cuda_array_interface__ or CUDA __dlpack__, not {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )))
    }
}

/// The origin of a cudagraph buffer operand, if it is one.
pub(crate) fn origin_of(obj: &Bound<'_, PyAny>) -> Option<Origin> {
    obj.downcast::<PyDeviceBuffer>()
        .ok()
        .map(|b| b.get().origin.clone())
}

#[pymethods]
impl PyDag {
    /// An empty DAG (see the class's docs for ``backend``).
    #[new]
    #[pyo3(signature = (backend=None))]
    fn new(backend: Option<&Bound<'_, PyAny>>) -> PyResult<Self> {
        Ok(PyDag {
            inner: Some(Dag::new()),
            id: NEXT_DAG.fetch_add(1, Ordering::Relaxed),
            backend: backend.map(Origin::from_arg).transpose()?,
            kernels: HashMap::new(),
            ffts: HashMap::new(),
        })
    }

    /// Adds a kernel node: ``kernel`` launched on ``grid`` x ``block`` (ints or tuples of up
    /// to 3) with ``args`` and ``shared_mem`` bytes of dynamic shared memory.
    ///
    /// Arguments: a ``DeviceBuffer``, ``HostBuffer`` or any array with
    /// ``__cuda_array_interface__`` (CuPy, PyTorch, Numba; C-contiguous; kept alive by the
    /// node) for pointer parameters; NumPy scalars (``numpy.float32(2.0)``) for values; plain
    /// ``int``/``float`` only where the kernel's parameter types are known (its C signature).
    /// Checked against the kernel's parameters now (``ValidationError`` naming the node).
    #[pyo3(signature = (kernel, grid, block, args, shared_mem=0, name=None))]
    fn add_kernel(
        &mut self,
        kernel: PyRef<'_, PyKernel>,
        grid: &Bound<'_, PyAny>,
        block: &Bound<'_, PyAny>,
        args: &Bound<'_, PyAny>,
        shared_mem: u32,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let info = kernel.info();
        let prepared = prepare_args(&info, args)?;
        let cfg = LaunchConfig::new(dim3(grid, "grid")?, dim3(block, "block")?)
            .with_shared_mem(shared_mem);
        let id = self
            .dag_mut()
            .add_kernel(kernel.kernel(), cfg, &as_args(&prepared))
            .py_err()?;
        self.kernels.insert(id.index(), info);
        Ok(self.named(id, name))
    }

    /// Adds a copy of all of ``src`` into ``dst`` (same size in bytes): device buffers,
    /// pinned ``HostBuffer``s, or arrays with ``__cuda_array_interface__``.
    #[pyo3(signature = (dst, src, name=None))]
    fn add_copy(
        &mut self,
        dst: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let hint = origin_of(dst).or_else(|| origin_of(src));
        let (d, _) = self.region(dst, hint.as_ref(), "copy destination", true)?;
        let (s, _) = self.region(src, hint.as_ref(), "copy source", false)?;
        let id = self
            .dag_mut()
            .add_copy(cudagraph::dst(d), cudagraph::src(s))
            .py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds a fill of all of ``dst`` (device memory) with ``value`` repeated: a NumPy scalar of
    /// 1, 2 or 4 bytes (``numpy.float32(1.0)``), or a plain ``int``/``float`` taken as the
    /// buffer's element type when that is 1, 2 or 4 bytes.
    #[pyo3(signature = (dst, value, name=None))]
    fn add_memset(
        &mut self,
        dst: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let hint = origin_of(dst);
        let (region, dtype) = self.region(dst, hint.as_ref(), "memset destination", true)?;
        let v = memset_value(value, dtype)?;
        let id = self.dag_mut().add_memset(region, v).py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds an FFT node: ``plan`` (an ``FftPlan``) transforming ``input`` into ``output``
    /// (device memory; the same buffer for in place) in ``direction`` (``"forward"``, the
    /// default, or ``"inverse"``, unnormalised). For plans with callbacks: ``load_scale`` / ``store_scale``
    /// (1 when not given), ``load_input`` / ``store_output`` to read or write another buffer
    /// (one slot of a ring, say), ``accumulate`` to add to the output. Checked now against
    /// the plan (sizes, element sizes: a ``complex_i8`` load reads 2-byte elements, e.g. an
    /// ``int16`` view of interleaved int8 pairs), ``ValidationError`` naming the node. Every FFT
    /// node has its own cuFFT handle and callback parameters.
    #[pyo3(signature = (plan, input, output, direction=None, load_scale=None, load_input=None, store_scale=None, store_output=None, accumulate=false, name=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn add_fft(
        &mut self,
        plan: PyRef<'_, crate::fft::PyFftPlan>,
        input: &Bound<'_, PyAny>,
        output: &Bound<'_, PyAny>,
        direction: Option<&Bound<'_, PyAny>>,
        load_scale: Option<f32>,
        load_input: Option<&Bound<'_, PyAny>>,
        store_scale: Option<f32>,
        store_output: Option<&Bound<'_, PyAny>>,
        accumulate: bool,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let hint = origin_of(input).or_else(|| origin_of(output));
        let (i, _) = self.region(input, hint.as_ref(), "FFT input", false)?;
        let (o, _) = self.region(output, hint.as_ref(), "FFT output", true)?;
        let li = load_input
            .map(|b| {
                self.region(b, hint.as_ref(), "FFT load_input", false)
                    .map(|r| r.0)
            })
            .transpose()?;
        let so = store_output
            .map(|b| {
                self.region(b, hint.as_ref(), "FFT store_output", true)
                    .map(|r| r.0)
            })
            .transpose()?;
        let params = crate::fft::params(&plan, load_scale, li, store_scale, so, accumulate);
        let spec = cudagraph::FftSpec {
            plan: plan.plan.clone(),
            direction: match direction {
                Some(d) => crate::fft::direction(d)?,
                None => cudagraph::Direction::Forward,
            },
            input: i,
            output: o,
            params,
        };
        let id = self.dag_mut().add_fft(spec).py_err()?;
        self.ffts.insert(id.index(), plan.into());
        Ok(self.named(id, name))
    }

    /// Adds a host node calling ``callable()`` (no arguments) in stream order, with the GIL
    /// taken. It must not call CUDA or wait for the GPU: cudagraph calls that would
    /// (``synchronize``, ``launch``, buffer constructors, ``to_numpy``, ...) raise
    /// ``ValidationError`` there; objects dropped there are freed later, outside it. An
    /// exception it raises is reported by the next ``Exec.launch`` or ``Exec.synchronize`` as
    /// ``HostCallbackError`` (the exception is its ``__cause__``), never lost (given to
    /// ``sys.unraisablehook`` when the ``Exec`` is dropped before reporting it). The DAG and its
    /// ``Exec``s hold ``callable``: a callable referring back to them makes a cycle that is not
    /// collected (break it, or ``del`` the ``Exec``).
    #[pyo3(signature = (callable, name=None))]
    fn add_host(&mut self, callable: &Bound<'_, PyAny>, name: Option<String>) -> PyResult<PyNode> {
        if !callable.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "add_host takes a callable",
            ));
        }
        let id = self
            .dag_mut()
            .add_host(crate::device::host_closure(callable.clone().unbind()));
        Ok(self.named(id, name))
    }

    /// Adds a node that does nothing (a join point for edges).
    #[pyo3(signature = (name=None))]
    fn add_empty(&mut self, name: Option<String>) -> PyNode {
        let id = self.dag_mut().add_empty();
        self.named(id, name)
    }

    /// Adds ``dag`` as a child graph (a copy of it as it is now; it keeps its buffers alive).
    #[pyo3(signature = (dag, name=None))]
    fn add_child(&mut self, dag: PyRef<'_, PyDag>, name: Option<String>) -> PyNode {
        let id = self.dag_mut().add_child(dag.dag());
        self.named(id, name)
    }

    /// Adds a node that records ``event`` (an ``Event``) when its dependencies have
    /// completed: work outside the graph (``Event.synchronize``, another graph's
    /// ``add_event_wait`` node) can wait for it. The node keeps ``event`` alive.
    #[pyo3(signature = (event, name=None))]
    fn add_event_record(&mut self, event: PyRef<'_, PyEvent>, name: Option<String>) -> PyNode {
        let id = self.dag_mut().add_event_record(event.event());
        self.named(id, name)
    }

    /// Adds a node after which the graph's work waits for ``event``: for the work before its
    /// last record (on a stream, or by another graph's ``add_event_record`` node). The node
    /// keeps ``event`` alive.
    #[pyo3(signature = (event, name=None))]
    fn add_event_wait(&mut self, event: PyRef<'_, PyEvent>, name: Option<String>) -> PyNode {
        let id = self.dag_mut().add_event_wait(event.event());
        self.named(id, name)
    }

    /// Replaces the event of event record or wait node ``node`` (``ValidationError`` for
    /// another kind of node).
    fn set_event(&mut self, node: PyRef<'_, PyNode>, event: PyRef<'_, PyEvent>) -> PyResult<()> {
        let id = self.node_id(&node)?;
        self.dag_mut().set_event(id, event.event()).py_err()
    }

    /// Makes kernel node ``after`` start early, before kernel node ``before`` completes: at
    /// ``port`` ``"programmatic"`` (the default: once every block of ``before`` has called
    /// ``cudaTriggerProgrammaticLaunchCompletion()`` or exited) or ``"launch_completion"``
    /// (once every block of ``before`` has started). ``after`` calls
    /// ``cudaGridDependencySynchronize()`` before reading what ``before`` writes. Both must be
    /// kernel nodes of one device (``ValidationError`` naming them otherwise).
    #[pyo3(signature = (before, after, port="programmatic"))]
    fn add_programmatic_dependency(
        &mut self,
        before: PyRef<'_, PyNode>,
        after: PyRef<'_, PyNode>,
        port: &str,
    ) -> PyResult<()> {
        let (b, a) = (self.node_id(&before)?, self.node_id(&after)?);
        let port = match port {
            "programmatic" => ProgrammaticPort::Programmatic,
            "launch_completion" => ProgrammaticPort::LaunchCompletion,
            other => {
                return Err(invalid(format!(
                    "port must be \"programmatic\" or \"launch_completion\", not {other:?}"
                )))
            }
        };
        self.dag_mut()
            .add_programmatic_dependency(b, a, port)
            .py_err()
    }

    /// Sets the launch attributes of kernel node ``node`` (replacing any set before; those not
    /// given are unset): ``priority`` (lower is higher; honoured when instantiated with
    /// ``use_node_priority=True``), ``cluster_dim`` (thread-block cluster, an int or a tuple of
    /// up to 3 dividing the grid; compute capability 9.0), ``cooperative`` (all blocks resident
    /// at once), ``shared_mem_carveout`` (percent, 0 to 100), an L2 access-policy window over
    /// ``access_window`` (a device buffer or array) with ``hit_ratio`` of its accesses getting
    /// ``hit`` and the others ``miss`` (``"normal"``, ``"streaming"``, ``"persisting"``), and
    /// ``mem_sync_domain`` (``"default"`` or ``"remote"``). Checked now against the node's
    /// launch shape, and against the device when validated (``ValidationError`` naming the
    /// node).
    #[pyo3(signature = (node, priority=None, cluster_dim=None, cooperative=false, shared_mem_carveout=None, access_window=None, hit_ratio=1.0, hit="persisting", miss="streaming", mem_sync_domain=None))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn set_launch_attributes(
        &mut self,
        node: PyRef<'_, PyNode>,
        priority: Option<i32>,
        cluster_dim: Option<&Bound<'_, PyAny>>,
        cooperative: bool,
        shared_mem_carveout: Option<u32>,
        access_window: Option<&Bound<'_, PyAny>>,
        hit_ratio: f32,
        hit: &str,
        miss: &str,
        mem_sync_domain: Option<&str>,
    ) -> PyResult<()> {
        let id = self.node_id(&node)?;
        let cluster = cluster_dim
            .map(|c| dim3(c, "cluster_dim").map(cudagraph::Dim3::from))
            .transpose()?;
        let access_policy = match access_window {
            Some(w) => {
                let hint = origin_of(w);
                let (window, _) = self.region(w, hint.as_ref(), "access_window", false)?;
                Some(AccessPolicy {
                    window,
                    hit_ratio,
                    hit: access_property(hit, "hit")?,
                    miss: access_property(miss, "miss")?,
                })
            }
            None => None,
        };
        let mem_sync_domain = match mem_sync_domain {
            None => None,
            Some("default") => Some(MemSyncDomain::Default),
            Some("remote") => Some(MemSyncDomain::Remote),
            Some(other) => {
                return Err(invalid(format!(
                    "mem_sync_domain must be \"default\" or \"remote\", not {other:?}"
                )))
            }
        };
        let attrs = LaunchAttributes {
            priority,
            cluster,
            cooperative,
            shared_mem_carveout,
            access_policy,
            mem_sync_domain,
        };
        self.dag_mut().set_launch_attributes(id, attrs).py_err()
    }

    /// Declares a conditional handle of this DAG (a ``Conditional``), reset to ``default`` at
    /// the start of every launch. Give it to one conditional node of this DAG (``add_if``,
    /// ``add_if_else``, ``add_while``, ``add_switch``) and, as a kernel argument, to the
    /// kernels that set it (in this DAG or in the bodies of its conditional nodes).
    #[pyo3(signature = (default=0))]
    fn conditional_handle(&mut self, default: u32) -> PyConditional {
        PyConditional {
            inner: self.dag_mut().conditional_handle(default),
        }
    }

    /// Adds an IF node: ``body`` (a ``Dag``, copied as it is now; it keeps its buffers,
    /// kernels and callables alive) runs when ``handle``'s value is non-zero.
    #[pyo3(signature = (handle, body, name=None))]
    fn add_if(
        &mut self,
        handle: PyRef<'_, PyConditional>,
        body: PyRef<'_, PyDag>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let id = self.dag_mut().add_if(&handle.inner, body.dag()).py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds an IF/ELSE node: ``then`` runs when ``handle``'s value is non-zero, ``else_``
    /// when it is zero (both ``Dag``s, copied).
    #[pyo3(signature = (handle, then, else_, name=None))]
    fn add_if_else(
        &mut self,
        handle: PyRef<'_, PyConditional>,
        then: PyRef<'_, PyDag>,
        else_: PyRef<'_, PyDag>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let id = self
            .dag_mut()
            .add_if_else(&handle.inner, then.dag(), else_.dag())
            .py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds a WHILE node: ``body`` (a ``Dag``, copied) runs again and again as long as
    /// ``handle``'s value is non-zero when an iteration would start (not at all if it is zero
    /// at first); a kernel of the body sets it to zero to stop.
    #[pyo3(signature = (handle, body, name=None))]
    fn add_while(
        &mut self,
        handle: PyRef<'_, PyConditional>,
        body: PyRef<'_, PyDag>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let id = self
            .dag_mut()
            .add_while(&handle.inner, body.dag())
            .py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds a SWITCH node: ``bodies[n]`` (``Dag``s, copied) runs when ``handle``'s value is
    /// ``n``; none runs when it is ``len(bodies)`` or more. At least one body.
    #[pyo3(signature = (handle, bodies, name=None))]
    fn add_switch(
        &mut self,
        handle: PyRef<'_, PyConditional>,
        bodies: Vec<PyRef<'_, PyDag>>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let cases: Vec<Dag> = bodies.iter().map(|b| b.dag().clone()).collect();
        let added = self.dag_mut().add_switch(&handle.inner, &cases);
        drop_detached(cases);
        let id = added.py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds a graph allocation node: ``shape`` elements of ``dtype`` (``float32`` when not
    /// given) allocated from CUDA's graph memory pool when a launch reaches it. Returns
    /// ``(node, buffer)``: the ``GraphBuffer`` is a kernel argument of, or filled by
    /// ``add_graph_memset`` in, nodes ordered after ``node`` and before its ``add_free``.
    /// A buffer never freed needs ``instantiate(auto_free_on_launch=True)``.
    #[pyo3(signature = (shape, dtype=None, name=None))]
    fn add_alloc(
        &mut self,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<(PyNode, PyGraphBuffer)> {
        let (shape, dtype, bytes) = crate::buffers::layout(shape, dtype)?;
        let (id, buf) = GraphBuf::alloc(self.dag_mut(), dtype, bytes / dtype.size).py_err()?;
        let buffer = PyGraphBuffer { buf, dtype, shape };
        Ok((self.named(id, name), buffer))
    }

    /// Adds a node freeing graph buffer ``buffer``; order it after every node that uses the
    /// buffer (validation checks). A buffer is freed at most once, by the DAG that allocated it.
    #[pyo3(signature = (buffer, name=None))]
    fn add_free(
        &mut self,
        buffer: PyRef<'_, PyGraphBuffer>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let id = each_graph_buf!(&buffer.buf, b => self.dag_mut().add_free(b)).py_err()?;
        Ok(self.named(id, name))
    }

    /// Adds a fill of all of graph buffer ``dst`` with ``value`` repeated (as in
    /// ``add_memset``); order it between the buffer's allocation and free.
    #[pyo3(signature = (dst, value, name=None))]
    fn add_graph_memset(
        &mut self,
        dst: PyRef<'_, PyGraphBuffer>,
        value: &Bound<'_, PyAny>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let v = memset_value(value, Some(dst.dtype))?;
        let id = each_graph_buf!(&dst.buf, b => self.dag_mut().add_graph_memset(b, v)).py_err()?;
        Ok(self.named(id, name))
    }

    /// Makes kernel node ``node`` device-updatable and returns its ``DeviceNode``: a kernel
    /// argument of kernels of this DAG that change its grid, enable or disable it, or set its
    /// parameters from the GPU. The same node gives the same ``DeviceNode``. An ``Exec`` with
    /// one refuses a whole-graph ``update``.
    fn device_node(&mut self, node: PyRef<'_, PyNode>) -> PyResult<PyDeviceNode> {
        let id = self.node_id(&node)?;
        let inner = self.dag_mut().device_node(id).py_err()?;
        Ok(PyDeviceNode { inner, node: id })
    }

    /// Adds a captured node: at every lowering onto a GPU (``instantiate``, ``Exec.update``),
    /// ``callable(stream)`` is called with a ``CaptureStream`` that records into the graph,
    /// after the node's dependencies, whatever is enqueued on it: work that has no node of its
    /// own (a CuPy or PyTorch operation on ``cupy.cuda.ExternalStream(stream.ptr)``, a
    /// library call). ``buffers`` are the device buffers or arrays the work uses: the node
    /// keeps them alive and validation checks their device. ``what`` describes the work (DOT,
    /// recordings; the callable's name when not given). A ``RecordingBackend`` records the
    /// capture without calling ``callable``.
    ///
    /// The caller's contract: the callable enqueues work only on the stream it is given (a
    /// wait for the GPU fails the capture, and cudagraph's waits raise ``ValidationError``
    /// there), and that work uses only ``buffers`` or memory the callable itself references
    /// (the DAG and its ``Exec``s hold the callable, hence what it references); any state the
    /// captured work refers to (a library's plan, its parameters) is left unchanged while an
    /// ``Exec`` may launch it. An exception it raises fails the lowering with a
    /// ``CudaGraphError`` whose ``__cause__`` it is.
    #[pyo3(signature = (callable, buffers=None, what=None, name=None))]
    fn add_captured(
        &mut self,
        callable: &Bound<'_, PyAny>,
        buffers: Option<Vec<Bound<'_, PyAny>>>,
        what: Option<String>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        if !callable.is_callable() {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "add_captured takes a callable (called with the capture stream)",
            ));
        }
        let buffers = buffers.unwrap_or_default();
        let hint = buffers.iter().find_map(|b| origin_of(b));
        let uses = buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let what = format!("captured work's buffer {i}");
                self.region(b, hint.as_ref(), &what, false).map(|r| r.0)
            })
            .collect::<PyResult<Vec<_>>>()?;
        let what = match what {
            Some(w) => w,
            None => callable
                .getattr("__qualname__")
                .and_then(|q| q.extract::<String>())
                .unwrap_or_else(|_| "a Python callable".to_string()),
        };
        let work = crate::captured::capture_closure(what.clone(), callable.clone().unbind());
        // SAFETY: the crate's contract for captured work is the Python caller's, documented
        // above: the callable enqueues only on the stream it is given (through the
        // `CaptureStream`, which refuses to give the handle once the call has returned); the
        // memory its work uses is `uses` (kept alive by the node) or referenced by the callable,
        // which the node holds for as long as the DAG or an `Exec` made from it may launch the
        // work; the host-side state it refers to is likewise the callable's, held with it.
        let id = unsafe { self.dag_mut().add_captured(what, uses, work) };
        Ok(self.named(id, name))
    }

    /// Names ``node`` (in errors, DOT and recordings); returns it.
    fn set_name(&mut self, node: PyRef<'_, PyNode>, name: String) -> PyResult<PyNode> {
        let id = self.node_id(&node)?;
        self.dag().node(id).py_err()?;
        self.dag_mut().set_name(id, name);
        Ok(node.clone())
    }

    /// The name of ``node`` (the given one, or ``kind#serial``).
    fn name_of(&self, node: PyRef<'_, PyNode>) -> PyResult<String> {
        let id = self.node_id(&node)?;
        Ok(self.dag().node(id).py_err()?.name().to_string())
    }

    /// Makes ``after`` run after ``before`` (a cycle is a ``ValidationError``).
    fn add_dependency(
        &mut self,
        before: PyRef<'_, PyNode>,
        after: PyRef<'_, PyNode>,
    ) -> PyResult<()> {
        let (b, a) = (self.node_id(&before)?, self.node_id(&after)?);
        self.dag_mut().add_dependency(b, a).py_err()
    }

    /// Makes each node run after the one before it in ``nodes``.
    fn chain(&mut self, nodes: Vec<PyRef<'_, PyNode>>) -> PyResult<()> {
        let ids = nodes
            .iter()
            .map(|n| self.node_id(n))
            .collect::<PyResult<Vec<_>>>()?;
        self.dag_mut().chain(&ids).py_err()
    }

    /// The DAG in Graphviz DOT.
    fn to_dot(&self) -> String {
        self.dag().to_dot()
    }

    /// The number of nodes.
    fn __len__(&self) -> usize {
        self.dag().node_count()
    }

    /// The number of edges.
    #[getter]
    fn edge_count(&self) -> usize {
        self.dag().edge_count()
    }

    /// The nodes in a topological order (every node after its dependencies).
    fn topological_order(&self) -> Vec<PyNode> {
        self.dag()
            .topological_order()
            .into_iter()
            .map(|id| self.node(id))
            .collect()
    }

    /// Validates the DAG for ``device`` (a ``Device``), as ``instantiate`` does first.
    fn validate(&self, py: Python<'_>, device: PyRef<'_, PyDevice>) -> PyResult<()> {
        let (dag, d) = (self.dag(), device.inner.clone());
        py.allow_threads(|| dag.validate(&d)).py_err()
    }

    /// Lowers the DAG onto a ``RecordingBackend`` (validated first): the backend records the
    /// CUDA calls that instantiating the DAG would make. Returns how many calls it recorded.
    fn lower(&self, backend: &Bound<'_, PyRecordingBackend>) -> PyResult<usize> {
        let mut rec = backend.borrow_mut();
        let before = rec.inner.call_count();
        self.dag().lower(&mut rec.inner).py_err()?;
        Ok(rec.inner.call_count() - before)
    }

    /// Validates and lowers the DAG into a CUDA graph on ``device`` (the DAG's ``backend``
    /// when that is a ``Device``, else ``Device(0)``) and instantiates it. The GIL is released
    /// meanwhile. ``auto_free_on_launch``: graph allocations a launch leaves (``add_alloc``
    /// without ``add_free``) are freed before the next launch (without it such a DAG is
    /// refused); ``use_node_priority``: honour kernel nodes' ``priority`` attributes.
    #[pyo3(signature = (device=None, *, auto_free_on_launch=false, use_node_priority=false))]
    fn instantiate(
        &self,
        py: Python<'_>,
        device: Option<PyRef<'_, PyDevice>>,
        auto_free_on_launch: bool,
        use_node_priority: bool,
    ) -> PyResult<PyExec> {
        refuse_in_host_callable("Dag.instantiate()")?;
        let device = match device {
            Some(d) => d.inner.clone(),
            None => match &self.backend {
                Some(Origin::Gpu(d)) => d.clone(),
                _ => crate::device::open_device(0)?,
            },
        };
        let dag = self.dag();
        let d = device.clone();
        let flags = InstantiateFlags {
            auto_free_on_launch,
            use_node_priority,
            ..InstantiateFlags::default()
        };
        crate::captured::clear_capture_error();
        let exec = py
            .allow_threads(|| dag.instantiate_with(&d, flags, None))
            .py_err()
            .map_err(|e| crate::captured::with_capture_cause(py, e))?;
        Ok(PyExec::new(exec, device, self))
    }

    fn __repr__(&self) -> String {
        format!(
            "Dag(nodes={}, edges={})",
            self.dag().node_count(),
            self.dag().edge_count()
        )
    }
}

/// A memset value: a NumPy scalar (or 0-d array) of 1, 2 or 4 bytes, the size of the buffer's
/// element when that is known, or a plain number as the buffer's type.
fn memset_value(value: &Bound<'_, PyAny>, dtype: Option<Dtype>) -> PyResult<MemsetValue> {
    let (d, bytes): (Dtype, Vec<u8>) = if value.hasattr("dtype")? && value.hasattr("tobytes")? {
        let ndim: Option<usize> = value.getattr("ndim").and_then(|n| n.extract()).ok();
        if ndim != Some(0) {
            return Err(invalid(
                "memset: the value must be one element (a NumPy scalar such as \
                 numpy.float32(1.0), or a 0-d array), not an array",
            ));
        }
        let d = Dtype::from_py(&value.getattr("dtype")?)?;
        if let Some(b) = dtype {
            // Sizes other than 1, 2 and 4 are refused below, saying so.
            if b.size != d.size && matches!(d.size, 1 | 2 | 4) {
                return Err(invalid(format!(
                    "memset: a {}-byte numpy.{} cannot fill {} elements ({} bytes each)",
                    d.size,
                    d.name(),
                    b.name(),
                    b.size
                )));
            }
        }
        (d, value.call_method0("tobytes")?.extract()?)
    } else {
        let Some(d) = dtype else {
            return Err(invalid("memset: give the value as a NumPy scalar"));
        };
        let is_int = value.is_instance_of::<PyInt>() || value.is_instance_of::<PyBool>();
        let b = match (d.kind, d.size) {
            ('f', 4) => (value.extract::<f64>()? as f32).to_le_bytes().to_vec(),
            ('i' | 'u' | 'b', n) if is_int && n <= 4 => {
                let v: i64 = value.extract()?;
                let fits = if d.kind == 'i' {
                    v >= -(1i64 << (n * 8 - 1)) && v < (1i64 << (n * 8 - 1))
                } else {
                    v >= 0 && v < (1i64 << (n * 8))
                };
                if !fits {
                    return Err(invalid(format!("memset: {v} does not fit in {}", d.name())));
                }
                v.to_le_bytes()[..n].to_vec()
            }
            _ => {
                return Err(invalid(format!(
                    "memset: a plain value cannot fill {} elements (memsets write 1, 2 or \
                     4-byte values); give a NumPy scalar of 1, 2 or 4 bytes",
                    d.name()
                )))
            }
        };
        (d, b)
    };
    Ok(match bytes.len() {
        1 => MemsetValue::U8(bytes[0]),
        2 => MemsetValue::U16(u16::from_le_bytes([bytes[0], bytes[1]])),
        4 => MemsetValue::U32(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        n => {
            return Err(invalid(format!(
                "memset: a {}-byte value ({}); memsets write 1, 2 or 4-byte values",
                n,
                d.name()
            )))
        }
    })
}

/// An L2 access property by name.
fn access_property(name: &str, what: &str) -> PyResult<AccessProperty> {
    match name {
        "normal" => Ok(AccessProperty::Normal),
        "streaming" => Ok(AccessProperty::Streaming),
        "persisting" => Ok(AccessProperty::Persisting),
        other => Err(invalid(format!(
            "{what} must be \"normal\", \"streaming\" or \"persisting\", not {other:?}"
        ))),
    }
}
