//! NCCL collectives as nodes: `Communicators`, `Comm`, `Dag.add_all_reduce` and the others.

use cudagraph::{Comm, Communicators, Dag, DeviceBuffer, ReduceOp};
use pyo3::prelude::*;

use crate::buffers::device_operand;
use crate::dag::{PyDag, PyNode};
use crate::device::{drop_detached, refuse_in_host_callable, Origin, PyDevice, PyRecordingBackend};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};
use crate::exec::PyExec;
use crate::typed::TypedBuffer;

/// NCCL communicators, one rank per device (``Communicators([dev0, dev1, ...])``, with
/// ``ncclCommInitAll``; NCCL is loaded at run time). ``Communicators.recording([rec0, ...])``
/// makes placeholders of recording backends, for building, checking and lowering DAGs with
/// collective nodes without a GPU.
///
/// A DAG with collective nodes holds one rank's side; ``check_ranks(dags)`` checks that the
/// ranks' DAGs fit together (matching collectives in the same order, sends matched by receives,
/// no rank waiting for another in a cycle), and ``instantiate(dags)`` (the only way to
/// instantiate them) makes one ``Exec`` per rank, each on its rank's device.
#[pyclass(module = "cudagraph._cudagraph", name = "Communicators", frozen)]
pub(crate) struct PyCommunicators {
    inner: Option<Communicators>,
    /// Each rank's origin (its device or recording backend), for wrapping foreign arrays.
    origins: Vec<Origin>,
}

impl Drop for PyCommunicators {
    fn drop(&mut self) {
        if let Some(c) = self.inner.take() {
            drop_detached(c);
        }
    }
}

impl PyCommunicators {
    fn comms(&self) -> &Communicators {
        self.inner.as_ref().expect("taken only by Drop")
    }
}

/// One rank's communicator (``Communicators.comm(rank)``), passed to the collective nodes of
/// that rank's DAG.
#[pyclass(module = "cudagraph._cudagraph", name = "Comm", frozen)]
pub(crate) struct PyComm {
    inner: Option<Comm>,
    origin: Origin,
}

impl Drop for PyComm {
    fn drop(&mut self) {
        if let Some(c) = self.inner.take() {
            drop_detached(c);
        }
    }
}

impl PyComm {
    fn comm(&self) -> &Comm {
        self.inner.as_ref().expect("taken only by Drop")
    }
}

fn dags_of<'a>(dags: &'a [PyRef<'_, PyDag>]) -> Vec<&'a Dag> {
    dags.iter().map(|d| d.dag()).collect()
}

#[pymethods]
impl PyCommunicators {
    #[new]
    fn new(py: Python<'_>, devices: Vec<PyRef<'_, PyDevice>>) -> PyResult<Self> {
        refuse_in_host_callable("Communicators()")?;
        let devices: Vec<cudagraph::Device> = devices.iter().map(|d| d.inner.clone()).collect();
        let comms = py.allow_threads(|| Communicators::new(&devices)).py_err()?;
        Ok(PyCommunicators {
            inner: Some(comms),
            origins: devices.into_iter().map(Origin::Gpu).collect(),
        })
    }

    /// Placeholder communicators of recording backends: rank ``i`` belongs to ``backends[i]``.
    #[staticmethod]
    fn recording(backends: Vec<Bound<'_, PyRecordingBackend>>) -> PyResult<Self> {
        let refs: Vec<PyRef<'_, PyRecordingBackend>> =
            backends.iter().map(|b| b.borrow()).collect();
        let inner: Vec<&cudagraph::RecordingBackend> = refs.iter().map(|r| &r.inner).collect();
        let comms = Communicators::recording(&inner);
        Ok(PyCommunicators {
            inner: Some(comms),
            origins: backends
                .iter()
                .map(|b| Origin::Recording(b.clone().unbind()))
                .collect(),
        })
    }

    fn __len__(&self) -> usize {
        self.comms().len()
    }

    /// Rank ``rank``'s communicator.
    fn comm(&self, rank: usize) -> PyResult<PyComm> {
        let comm = self.comms().comm(rank).py_err()?;
        Ok(PyComm {
            inner: Some(comm),
            origin: self.origins[rank].clone(),
        })
    }

    /// Checks that ``dags`` (``dags[r]`` holds rank ``r``'s collective nodes) fit together:
    /// every collective node of ``dags[r]`` is of rank ``r``; each DAG's collective nodes are
    /// ordered by its edges; the ranks' collectives match in order (call, operator, dtype,
    /// count, root); every send is matched by a receive; no rank waits for another in a
    /// cycle. A ``ValidationError`` names the node.
    fn check_ranks(&self, dags: Vec<PyRef<'_, PyDag>>) -> PyResult<()> {
        self.comms().check_ranks(&dags_of(&dags)).py_err()
    }

    /// Instantiates ``dags`` (one per rank, after ``check_ranks``), each on its rank's device,
    /// all at once (NCCL captures every rank's collectives together): one ``Exec`` per rank.
    /// Each rank is lowered on a thread of its own: an exception raised by a captured node's
    /// callable there is named in the error's message, but is not its ``__cause__`` (as it is
    /// for ``Dag.instantiate``).
    fn instantiate(&self, py: Python<'_>, dags: Vec<PyRef<'_, PyDag>>) -> PyResult<Vec<PyExec>> {
        refuse_in_host_callable("Communicators.instantiate()")?;
        let refs = dags_of(&dags);
        let comms = self.comms();
        let execs = py.allow_threads(|| comms.instantiate(&refs)).py_err()?;
        execs
            .into_iter()
            .zip(&dags)
            .enumerate()
            .map(|(rank, (exec, dag))| {
                let device = match &self.origins[rank] {
                    Origin::Gpu(d) => d.clone(),
                    Origin::Recording(_) => {
                        unreachable!("recording communicators instantiate nothing")
                    }
                };
                Ok(PyExec::new(exec, device, dag))
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!("Communicators(ranks={})", self.comms().len())
    }
}

#[pymethods]
impl PyComm {
    /// This communicator's rank.
    #[getter]
    fn rank(&self) -> usize {
        self.comm().rank()
    }

    /// The number of ranks.
    #[getter]
    fn ranks(&self) -> usize {
        self.comm().ranks()
    }

    fn __repr__(&self) -> String {
        format!("{:?}", self.comm())
    }
}

fn reduce_op(op: &str) -> PyResult<ReduceOp> {
    Ok(match op.to_ascii_lowercase().as_str() {
        "sum" => ReduceOp::Sum,
        "prod" => ReduceOp::Prod,
        "max" => ReduceOp::Max,
        "min" => ReduceOp::Min,
        "avg" => ReduceOp::Avg,
        _ => {
            return Err(invalid(format!(
                "reduction `{op}`: expected \"sum\", \"prod\", \"max\", \"min\" or \"avg\""
            )))
        }
    })
}

/// `$body` with `$t` the element type `$ty` and the `$v`s the buffers of `$bufs` viewed as
/// `$ty` (the binding's stand-in variant `$variant` of that size).
macro_rules! nccl_view {
    ($variant:ident, $ty:ty, $bufs:expr, |$t:ident, $($v:ident),+| $body:expr) => {{
        type $t = $ty;
        let views: Vec<DeviceBuffer<$ty>> = $bufs
            .iter()
            .map(|x| match x {
                TypedBuffer::$variant(d) => d.view_as::<$ty>(),
                _ => unreachable!("operands of one dtype are one variant"),
            })
            .collect();
        let [$($v),+] = &views[..] else {
            unreachable!("one view per operand")
        };
        Ok::<_, PyErr>($body)
    }};
}

/// `$body` with the buffers seen as the NCCL type of `$dtype` (int8, uint8, int32, uint32,
/// int64, uint64, float32, float64), or a `ValidationError` for another dtype.
macro_rules! nccl_typed {
    ($dtype:expr, $bufs:expr, |$t:ident, $($v:ident),+| $body:expr) => {
        match ($dtype.kind, $dtype.size) {
            ('i', 1) => nccl_view!(B1, i8, $bufs, |$t, $($v),+| $body),
            ('u', 1) => nccl_view!(B1, u8, $bufs, |$t, $($v),+| $body),
            ('i', 4) => nccl_view!(B4, i32, $bufs, |$t, $($v),+| $body),
            ('u', 4) => nccl_view!(B4, u32, $bufs, |$t, $($v),+| $body),
            ('i', 8) => nccl_view!(B8, i64, $bufs, |$t, $($v),+| $body),
            ('u', 8) => nccl_view!(B8, u64, $bufs, |$t, $($v),+| $body),
            ('f', 4) => nccl_view!(B4, f32, $bufs, |$t, $($v),+| $body),
            ('f', 8) => nccl_view!(B8, f64, $bufs, |$t, $($v),+| $body),
            _ => Err(invalid(format!(
                "a collective of {}: NCCL nodes here are of int8, uint8, int32, uint32, int64, \
                 uint64, float32 or float64",
                $dtype.name()
            ))),
        }
    };
}

/// A collective builder's body: the operands (`(object, name, written)`) checked and wrapped
/// for `$comm`'s device, `$call` (the crate's builder, given the DAG as `$dag`, the
/// communicator as `$c`, the element type as `$t` and the buffers as the `$v`s) run, the node
/// named `$name`.
macro_rules! collective {
    ($self:ident, $comm:ident, $name:ident, [$($op:expr),+],
     |$dag:ident, $c:ident, $t:ident, $($v:ident),+| $call:expr) => {{
        let (bufs, dtype) = $self.collective_operands(&$comm, &[$($op),+])?;
        let $c = $comm.comm();
        let $dag = $self.dag_mut();
        let id = nccl_typed!(dtype, bufs, |$t, $($v),+| $call)?.py_err()?;
        Ok($self.named(id, $name))
    }};
}

impl PyDag {
    /// The operands of a collective node of `comm`, all of one dtype.
    fn collective_operands(
        &self,
        comm: &PyComm,
        ops: &[(&Bound<'_, PyAny>, &str, bool)],
    ) -> PyResult<(Vec<TypedBuffer>, Dtype)> {
        // The node's device is its rank's: foreign operands are wrapped for it.
        let origin = comm.origin.clone();
        let mut bufs = Vec::with_capacity(ops.len());
        let mut dtype = None;
        for &(obj, what, writes) in ops {
            let (b, d) = device_operand(obj, &origin, what, writes)?;
            match dtype {
                Some(first) if first != d => {
                    return Err(invalid(format!(
                        "{what} holds {} but {} holds {}; a collective is of one dtype",
                        d.name(),
                        ops[0].1,
                        Dtype::name(first)
                    )))
                }
                _ => dtype = Some(d),
            }
            bufs.push(b);
        }
        Ok((bufs, dtype.expect("at least one operand")))
    }
}

#[pymethods]
impl PyDag {
    /// Adds an all-reduce (``ncclAllReduce``): ``recv`` gets the reduction (``op``: ``"sum"``,
    /// ``"prod"``, ``"max"``, ``"min"``, ``"avg"``) over the ranks of their ``send``; both of
    /// one length and dtype (int8, uint8, int32, uint32, int64, uint64, float32, float64),
    /// ``DeviceBuffer``s or other libraries' arrays on ``comm``'s device (``send`` may be
    /// ``recv``: in place).
    #[pyo3(signature = (comm, send, recv, *, op="sum", name=None))]
    fn add_all_reduce(
        &mut self,
        comm: PyRef<'_, PyComm>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: &str,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let op = reduce_op(op)?;
        collective!(
            self,
            comm,
            name,
            [(send, "send", false), (recv, "recv", true)],
            |dag, c, T, s, r| dag.add_all_reduce::<T>(c, s, r, op)
        )
    }

    /// Adds an all-gather (``ncclAllGather``): ``recv`` (ranks × ``len(send)`` elements) gets
    /// every rank's ``send``, in rank order.
    #[pyo3(signature = (comm, send, recv, *, name=None))]
    fn add_all_gather(
        &mut self,
        comm: PyRef<'_, PyComm>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        collective!(
            self,
            comm,
            name,
            [(send, "send", false), (recv, "recv", true)],
            |dag, c, T, s, r| dag.add_all_gather::<T>(c, s, r)
        )
    }

    /// Adds a reduce-scatter (``ncclReduceScatter``): ``recv`` (``len(send)`` / ranks
    /// elements) gets this rank's share of the reduction over the ranks' ``send``.
    #[pyo3(signature = (comm, send, recv, *, op="sum", name=None))]
    fn add_reduce_scatter(
        &mut self,
        comm: PyRef<'_, PyComm>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        op: &str,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        let op = reduce_op(op)?;
        collective!(
            self,
            comm,
            name,
            [(send, "send", false), (recv, "recv", true)],
            |dag, c, T, s, r| dag.add_reduce_scatter::<T>(c, s, r, op)
        )
    }

    /// Adds a broadcast (``ncclBroadcast``): every rank's ``recv`` gets rank ``root``'s
    /// ``send``.
    #[pyo3(signature = (comm, send, recv, *, root, name=None))]
    fn add_broadcast(
        &mut self,
        comm: PyRef<'_, PyComm>,
        send: &Bound<'_, PyAny>,
        recv: &Bound<'_, PyAny>,
        root: usize,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        collective!(
            self,
            comm,
            name,
            [(send, "send", false), (recv, "recv", true)],
            |dag, c, T, s, r| dag.add_broadcast::<T>(c, s, r, root)
        )
    }

    /// Adds a send of ``buf`` to rank ``peer`` (``ncclSend``), matched by that rank's
    /// ``add_recv`` (same length and dtype).
    #[pyo3(signature = (comm, buf, peer, *, name=None))]
    fn add_send(
        &mut self,
        comm: PyRef<'_, PyComm>,
        buf: &Bound<'_, PyAny>,
        peer: usize,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        collective!(self, comm, name, [(buf, "buf", false)], |dag, c, T, s| dag
            .add_send::<T>(c, s, peer))
    }

    /// Adds a receive into ``buf`` from rank ``peer`` (``ncclRecv``).
    #[pyo3(signature = (comm, buf, peer, *, name=None))]
    fn add_recv(
        &mut self,
        comm: PyRef<'_, PyComm>,
        buf: &Bound<'_, PyAny>,
        peer: usize,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        collective!(self, comm, name, [(buf, "buf", true)], |dag, c, T, r| dag
            .add_recv::<T>(c, r, peer))
    }

    /// Adds a send of ``send`` to rank ``to`` and a receive into ``recv`` from rank ``from_``
    /// in one NCCL group (two ranks exchanging, or a ring shift, cannot wait on each other).
    #[pyo3(signature = (comm, send, to, recv, from_, *, name=None))]
    #[allow(clippy::too_many_arguments)] // reason: the Python signature
    fn add_send_recv(
        &mut self,
        comm: PyRef<'_, PyComm>,
        send: &Bound<'_, PyAny>,
        to: usize,
        recv: &Bound<'_, PyAny>,
        from_: usize,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        collective!(
            self,
            comm,
            name,
            [(send, "send", false), (recv, "recv", true)],
            |dag, c, T, s, r| dag.add_send_recv::<T>(c, s, to, r, from_)
        )
    }
}
