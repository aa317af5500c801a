//! `DeviceBuffer`, `HostBuffer` and foreign arrays (`__cuda_array_interface__`).

use std::sync::Mutex;

use cudagraph::{HostBuffer, Region};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

use crate::device::{drop_detached, refuse_in_host_callable, Origin, PyDevice};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};
use crate::typed::TypedBuffer;

/// The shape and dtype arguments, and the byte size they make.
pub(crate) fn layout(
    shape: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<(Vec<usize>, Dtype, usize)> {
    let dtype = match dtype {
        Some(d) => Dtype::from_py(d)?,
        None => Dtype::F32,
    };
    let shape: Vec<usize> = match shape.extract::<usize>() {
        Ok(n) => vec![n],
        Err(_) => shape.extract()?,
    };
    let bytes = byte_size(&shape, dtype)?;
    Ok((shape, dtype, bytes))
}

fn byte_size(shape: &[usize], dtype: Dtype) -> PyResult<usize> {
    shape
        .iter()
        .try_fold(dtype.size, |acc, &n| acc.checked_mul(n))
        .ok_or_else(|| invalid(format!("shape {shape:?} of {} overflows", dtype.name())))
}

/// The bytes of a buffer-protocol object (a NumPy array, `bytes`, `array.array`, …) in C
/// order, with its shape and dtype.
fn host_bytes(obj: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, Vec<usize>, Dtype)> {
    let py = obj.py();
    let mv = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((obj,))
        .map_err(|_| {
            invalid(format!(
                "{} does not expose the buffer protocol (give a NumPy array)",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
    let shape: Vec<usize> = mv.getattr("shape")?.extract()?;
    let dtype = if obj.hasattr("dtype")? {
        Dtype::from_py(&obj.getattr("dtype")?)?
    } else {
        Dtype::from_format(
            &mv.getattr("format")?.extract::<String>()?,
            mv.getattr("itemsize")?.extract()?,
        )?
    };
    let bytes: Vec<u8> = mv
        .call_method0("tobytes")?
        .downcast_into::<PyBytes>()?
        .as_bytes()
        .to_vec();
    Ok((bytes, shape, dtype))
}

/// A NumPy array of `bytes` (NumPy imported here; an error naming it when missing).
fn to_numpy<'py>(
    py: Python<'py>,
    bytes: Vec<u8>,
    shape: &[usize],
    dtype: Dtype,
) -> PyResult<Bound<'py, PyAny>> {
    let np = py
        .import("numpy")
        .map_err(|_| invalid("to_numpy needs NumPy (pip install numpy)"))?;
    let raw = pyo3::types::PyByteArray::new(py, &bytes);
    np.getattr("frombuffer")?
        .call1((raw, dtype.typestr()))?
        .call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// An array in device memory: its shape and dtype are the Python side's; the memory is the
/// crate's reference-counted allocation, kept alive by every DAG and ``Exec`` that uses it.
///
/// Exposes ``__cuda_array_interface__`` (v3), so ``cupy.asarray(buf)`` and
/// ``torch.as_tensor(buf, device='cuda')`` see the same memory. ``to_numpy()`` and
/// ``copy_from()`` first wait for the queued graph launches that use the buffer.
#[pyclass(module = "cudagraph._cudagraph", name = "DeviceBuffer", frozen)]
pub(crate) struct PyDeviceBuffer {
    pub(crate) buf: Option<TypedBuffer>,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: Dtype,
    pub(crate) origin: Origin,
}

impl Drop for PyDeviceBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            drop_detached(b);
        }
    }
}

impl PyDeviceBuffer {
    pub(crate) fn new(buf: TypedBuffer, shape: Vec<usize>, dtype: Dtype, origin: Origin) -> Self {
        PyDeviceBuffer {
            buf: Some(buf),
            shape,
            dtype,
            origin,
        }
    }

    pub(crate) fn buf(&self) -> &TypedBuffer {
        self.buf.as_ref().expect("taken only by Drop")
    }

    /// An `AttributeError` for a recording backend's placeholder, which has no memory (so
    /// `hasattr(buf, "__cuda_array_interface__")` is false for it).
    fn check_real(&self) -> PyResult<()> {
        if self.buf().device().is_none() {
            return Err(pyo3::exceptions::PyAttributeError::new_err(
                "a RecordingBackend's placeholder has no memory behind it",
            ));
        }
        Ok(())
    }

    /// Waits (GIL released) for the queued GPU work that uses the buffer.
    fn wait_idle(&self, py: Python<'_>, what: &str) -> PyResult<()> {
        refuse_in_host_callable(what)?;
        let b = self.buf();
        py.allow_threads(|| b.synchronize()).py_err()
    }
}

fn device_or_default(device: Option<PyRef<'_, PyDevice>>) -> PyResult<cudagraph::Device> {
    match device {
        Some(d) => Ok(d.inner.clone()),
        None => crate::device::open_device(0),
    }
}

#[pymethods]
impl PyDeviceBuffer {
    /// Allocates a zeroed array of ``shape`` and ``dtype`` on ``device`` (``Device(0)``).
    #[new]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    fn py_new(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<PyRef<'_, PyDevice>>,
    ) -> PyResult<Self> {
        refuse_in_host_callable("DeviceBuffer()")?;
        let (shape, dtype, bytes) = layout(shape, dtype)?;
        let device = device_or_default(device)?;
        let d = device.clone();
        let buf = py
            .allow_threads(move || TypedBuffer::zeros(&d, dtype, bytes))
            .py_err()?;
        Ok(Self::new(buf, shape, dtype, Origin::Gpu(device)))
    }

    /// A device copy of a host array (a NumPy array, or any buffer-protocol object).
    #[staticmethod]
    #[pyo3(signature = (array, device=None))]
    fn from_numpy(
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        device: Option<PyRef<'_, PyDevice>>,
    ) -> PyResult<Self> {
        refuse_in_host_callable("DeviceBuffer.from_numpy()")?;
        let (bytes, shape, dtype) = host_bytes(array)?;
        let device = device_or_default(device)?;
        let d = device.clone();
        let buf = py
            .allow_threads(move || TypedBuffer::from_bytes(&d, dtype, &bytes))
            .py_err()?;
        Ok(Self::new(buf, shape, dtype, Origin::Gpu(device)))
    }

    /// A NumPy copy of the contents, after the queued GPU work that uses the buffer.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        refuse_in_host_callable("DeviceBuffer.to_numpy()")?;
        let b = self.buf();
        let v = py.allow_threads(|| b.to_bytes()).py_err()?;
        to_numpy(py, v, &self.shape, self.dtype)
    }

    /// Overwrites the contents with a host array of the same size in bytes, after the queued
    /// GPU work that uses the buffer.
    fn copy_from(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        refuse_in_host_callable("DeviceBuffer.copy_from()")?;
        let (bytes, _, _) = host_bytes(array)?;
        if bytes.len() != self.buf().size_bytes() {
            return Err(invalid(format!(
                "copy_from: the array has {} bytes but the buffer {}",
                bytes.len(),
                self.buf().size_bytes()
            )));
        }
        let b = self.buf();
        py.allow_threads(|| b.copy_from_bytes(&bytes)).py_err()
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type's typestr (``<f4``).
    #[getter]
    fn dtype(&self) -> String {
        self.dtype.typestr()
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.buf().size_bytes()
    }

    /// Number of elements.
    #[getter]
    fn size(&self) -> usize {
        self.shape.iter().product()
    }

    /// The device's ordinal, or ``None`` for a recording backend's placeholder.
    #[getter]
    fn device(&self) -> Option<usize> {
        self.buf().device().map(|d| d.ordinal())
    }

    /// ``__cuda_array_interface__`` version 3 (C-contiguous; no stream). Reading it first
    /// waits for the queued GPU work that uses the buffer (graph launches), so the memory is
    /// idle when handed over; order later launches with the consumer's work through the
    /// stream (launch on the consumer's stream). A recording backend's placeholder has none
    /// (``AttributeError``).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.check_real()?;
        self.wait_idle(py, "DeviceBuffer.__cuda_array_interface__")?;
        let d = PyDict::new(py);
        d.set_item("shape", PyTuple::new(py, &self.shape)?)?;
        d.set_item("typestr", self.dtype.typestr())?;
        // SAFETY (of reading the address): the consumer holds this object (the interface's
        // contract), which keeps the allocation alive.
        let ptr = unsafe { self.buf().as_raw_ptr() };
        d.set_item("data", (ptr, false))?;
        d.set_item("strides", py.None())?;
        d.set_item("version", 3)?;
        d.set_item("stream", py.None())?;
        Ok(d)
    }

    /// DLPack export (``torch.from_dlpack(buf)``, ``cupy.from_dlpack(buf)``): a capsule whose
    /// tensor keeps the memory alive (not this object) until the consumer deletes it. Waits
    /// first for the queued GPU work that uses the buffer, so the memory is idle whatever
    /// ``stream`` the consumer names. ``copy=True`` and devices other than this buffer's are
    /// refused (``BufferError``). A versioned (DLPack 1.0) capsule when ``max_version`` allows
    /// it, the legacy one otherwise.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, usize)>,
        copy: Option<bool>,
    ) -> PyResult<PyObject> {
        let _ = stream;
        self.check_real()?;
        let device = self.buf().device().map(|d| d.ordinal()).unwrap_or(0);
        if let Some(d) = dl_device {
            if d != (crate::dlpack::DL_CUDA, device) {
                return Err(pyo3::exceptions::PyBufferError::new_err(format!(
                    "the buffer is on CUDA device {device}; no export to DLPack device {d:?}"
                )));
            }
        }
        if copy == Some(true) {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "DeviceBuffer exports its memory, not a copy (copy=True)",
            ));
        }
        self.wait_idle(py, "DeviceBuffer.__dlpack__()")?;
        // SAFETY (of reading the address): the capsule's tensor holds the region below, which
        // keeps the allocation alive.
        let ptr = unsafe { self.buf().as_raw_ptr() };
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        crate::dlpack::export(
            py,
            self.buf().region(),
            ptr,
            device,
            &self.shape,
            self.dtype,
            versioned,
        )
    }

    /// ``(2, ordinal)``: CUDA memory of this device (DLPack's ``kDLCUDA``).
    fn __dlpack_device__(&self) -> PyResult<(i32, usize)> {
        self.check_real()?;
        Ok((
            crate::dlpack::DL_CUDA,
            self.buf().device().map(|d| d.ordinal()).unwrap_or(0),
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "DeviceBuffer(shape={:?}, dtype={}, device={})",
            self.shape,
            self.dtype.name(),
            self.device()
                .map(|d| d.to_string())
                .unwrap_or_else(|| "recording".into())
        )
    }
}

/// An array in page-locked (pinned) host memory, for copy nodes to and from the host.
///
/// The host reads it with ``to_numpy()`` and writes it with ``copy_from()``: both first wait
/// for the queued GPU work that uses the buffer (graph launches), so the host never touches
/// memory a launch may be writing.
#[pyclass(module = "cudagraph._cudagraph", name = "HostBuffer", frozen)]
pub(crate) struct PyHostBuffer {
    /// The buffer, locked (without the GIL) by the host's reads and writes, which wait for
    /// the GPU work using it: a node added meanwhile on another thread needs only `region`.
    buf: Mutex<Option<HostBuffer<u8>>>,
    /// All of the buffer as a region, for nodes (taken at construction).
    region: Option<Region>,
    nbytes: usize,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: Dtype,
}

impl Drop for PyHostBuffer {
    fn drop(&mut self) {
        let b = self.buf.get_mut().unwrap_or_else(|p| p.into_inner()).take();
        let r = self.region.take();
        drop_detached((r, b));
    }
}

impl PyHostBuffer {
    pub(crate) fn new(buf: HostBuffer<u8>, shape: Vec<usize>, dtype: Dtype) -> Self {
        PyHostBuffer {
            region: Some(buf.region(..)),
            nbytes: buf.len(),
            buf: Mutex::new(Some(buf)),
            shape,
            dtype,
        }
    }

    /// All of the buffer as a region (no lock taken: usable while another thread waits in
    /// `to_numpy` or `copy_from`).
    pub(crate) fn region(&self) -> Region {
        self.region.clone().expect("taken only by Drop")
    }

    /// Runs `f` on the buffer with the GIL released (the lock is taken without it).
    fn with_buf<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut HostBuffer<u8>) -> R + Send,
    ) -> R {
        py.allow_threads(|| {
            let mut g = self.buf.lock().unwrap_or_else(|p| p.into_inner());
            f(g.as_mut().expect("taken only by Drop"))
        })
    }
}

#[pymethods]
impl PyHostBuffer {
    /// Allocates a zeroed pinned array of ``shape`` and ``dtype`` (for ``device``'s copies;
    /// pinned memory is usable from every device).
    #[new]
    #[pyo3(signature = (shape, dtype=None, device=None))]
    fn py_new(
        py: Python<'_>,
        shape: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
        device: Option<PyRef<'_, PyDevice>>,
    ) -> PyResult<Self> {
        refuse_in_host_callable("HostBuffer()")?;
        let (shape, dtype, bytes) = layout(shape, dtype)?;
        let device = device_or_default(device)?;
        let buf = py
            .allow_threads(move || HostBuffer::<u8>::zeros(&device, bytes))
            .py_err()?;
        Ok(Self::new(buf, shape, dtype))
    }

    /// A pinned copy of a host array (a NumPy array, or any buffer-protocol object).
    #[staticmethod]
    #[pyo3(signature = (array, device=None))]
    fn from_numpy(
        py: Python<'_>,
        array: &Bound<'_, PyAny>,
        device: Option<PyRef<'_, PyDevice>>,
    ) -> PyResult<Self> {
        refuse_in_host_callable("HostBuffer.from_numpy()")?;
        let (bytes, shape, dtype) = host_bytes(array)?;
        let device = device_or_default(device)?;
        let buf = py
            .allow_threads(move || HostBuffer::<u8>::from_slice(&device, &bytes))
            .py_err()?;
        Ok(Self::new(buf, shape, dtype))
    }

    /// A NumPy copy of the contents, after the queued GPU work that uses the buffer.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        refuse_in_host_callable("HostBuffer.to_numpy()")?;
        let v = self.with_buf(py, |b| b.to_vec()).py_err()?;
        to_numpy(py, v, &self.shape, self.dtype)
    }

    /// Overwrites the contents with a host array of the same size in bytes, after the queued
    /// GPU work that uses the buffer.
    fn copy_from(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<()> {
        refuse_in_host_callable("HostBuffer.copy_from()")?;
        let (bytes, _, _) = host_bytes(array)?;
        self.with_buf(py, |b| b.copy_from_slice(&bytes)).py_err()
    }

    /// The shape.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, &self.shape)
    }

    /// The element type's typestr (``<f4``).
    #[getter]
    fn dtype(&self) -> String {
        self.dtype.typestr()
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.nbytes
    }

    fn __repr__(&self) -> String {
        format!(
            "HostBuffer(shape={:?}, dtype={})",
            self.shape,
            self.dtype.name()
        )
    }
}

/// What a `__cuda_array_interface__` says about an array, checked: C-contiguous, no mask, a
/// supported dtype, a non-null pointer unless empty.
#[derive(Debug)]
pub(crate) struct ForeignArray {
    pub ptr: u64,
    pub bytes: usize,
    pub dtype: Dtype,
    /// The producer's stream (v3), to be synchronised before use.
    pub stream: Option<usize>,
    /// `data`'s read-only flag: such an array is never a node's destination, nor a kernel
    /// argument other than a `const T*` parameter.
    pub readonly: bool,
}

/// Reads and checks `obj.__cuda_array_interface__`; `what` names the operand in errors.
pub(crate) fn read_cai(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<ForeignArray> {
    let cai = obj.getattr("__cuda_array_interface__")?;
    let cai = cai
        .downcast::<PyDict>()
        .map_err(|_| invalid(format!("{what}: __cuda_array_interface__ is not a dict")))?;
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        cai.get_item(k)?
            .ok_or_else(|| invalid(format!("{what}: __cuda_array_interface__ has no `{k}`")))
    };
    let shape: Vec<usize> = get("shape")?.extract().map_err(|_| {
        invalid(format!(
            "{what}: `shape` is not a tuple of non-negative ints"
        ))
    })?;
    let typestr: String = get("typestr")?.extract()?;
    let dtype = Dtype::parse(&typestr).map_err(|e| {
        invalid(format!(
            "{what}: {}",
            e.value(obj.py())
                .str()
                .map(|s| s.to_string())
                .unwrap_or_default()
        ))
    })?;
    let (ptr, readonly): (u64, bool) = get("data")?
        .extract()
        .map_err(|_| invalid(format!("{what}: `data` is not (pointer, read_only)")))?;
    if let Some(mask) = cai.get_item("mask")? {
        if !mask.is_none() {
            return Err(invalid(format!("{what}: masked arrays are not supported")));
        }
    }
    let bytes = byte_size(&shape, dtype)?;
    if let Some(strides) = cai.get_item("strides")? {
        if !strides.is_none() {
            let strides: Vec<isize> = strides.extract()?;
            if strides.len() != shape.len() {
                return Err(invalid(format!(
                    "{what}: {} strides for {} dimensions",
                    strides.len(),
                    shape.len()
                )));
            }
            // C-contiguous strides (dimensions of length 1 may have any stride).
            let mut expect = dtype.size as isize;
            for (&n, &s) in shape.iter().zip(&strides).rev() {
                if n > 1 && s != expect {
                    return Err(invalid(format!(
                        "{what}: strides {strides:?} (bytes) of shape {shape:?} are not \
                         C-contiguous; pass a contiguous array (cupy.ascontiguousarray(a), \
                         tensor.contiguous())"
                    )));
                }
                expect *= n as isize;
            }
        }
    }
    if ptr == 0 && bytes > 0 {
        return Err(invalid(format!("{what}: the data pointer is null")));
    }
    check_aligned(ptr, dtype, what)?;
    let stream = match cai.get_item("stream")? {
        Some(s) if !s.is_none() => {
            let s: usize = s.extract().map_err(|_| {
                invalid(format!(
                    "{what}: `stream` is not None or a stream handle (a positive int)"
                ))
            })?;
            if s == 0 {
                return Err(invalid(format!(
                    "{what}: `stream` is 0, which the interface forbids (ambiguous)"
                )));
            }
            Some(s)
        }
        _ => None,
    };
    Ok(ForeignArray {
        ptr,
        bytes,
        dtype,
        stream,
        readonly,
    })
}

/// Refuses a data pointer not aligned to its element size: a kernel's access through it faults
/// (a misaligned address, which ruins the CUDA context), and CUDA's copies of wider elements may
/// too.
pub(crate) fn check_aligned(ptr: u64, dtype: Dtype, what: &str) -> PyResult<()> {
    if !ptr.is_multiple_of(dtype.size as u64) {
        return Err(invalid(format!(
            "{what}: the data pointer {ptr:#x} is not aligned to the {}-byte elements of {}",
            dtype.size,
            dtype.name()
        )));
    }
    Ok(())
}

/// The CUDA device an array says it is on: `__dlpack_device__()` (CUDA or managed memory),
/// else `.device.id` (CuPy) or `.device.index` (PyTorch); `None` when it says nothing.
fn stated_device(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<usize>> {
    if obj.hasattr("__dlpack_device__")? {
        if let Ok((kind, id)) = obj
            .call_method0("__dlpack_device__")?
            .extract::<(i32, usize)>()
        {
            return match kind {
                // kDLCUDA, kDLCUDAManaged
                2 | 13 => Ok(Some(id)),
                _ => Err(invalid(format!(
                    "{what}: the array is not in device memory (DLPack device type {kind})"
                ))),
            };
        }
    }
    if let Ok(dev) = obj.getattr("device") {
        if let Ok(id) = dev.getattr("id").and_then(|i| i.extract::<usize>()) {
            return Ok(Some(id));
        }
        if let Ok(t) = dev.getattr("type").and_then(|t| t.extract::<String>()) {
            if t != "cuda" {
                return Err(invalid(format!(
                    "{what}: the tensor is on `{t}`, not a GPU"
                )));
            }
            if let Ok(i) = dev.getattr("index").and_then(|i| i.extract::<usize>()) {
                return Ok(Some(i));
            }
        }
    }
    Ok(None)
}

/// A device operand (of a GEMM or collective node) as the buffer it is (a cudagraph
/// `DeviceBuffer`, or another library's array wrapped for `origin`), with its dtype; `writes`
/// when the node writes it (a read-only foreign array is refused then).
pub(crate) fn device_operand(
    obj: &Bound<'_, PyAny>,
    origin: &Origin,
    what: &str,
    writes: bool,
) -> PyResult<(TypedBuffer, Dtype)> {
    if let Ok(b) = obj.downcast::<PyDeviceBuffer>() {
        let b = b.get();
        return Ok((b.buf().share(), b.dtype));
    }
    if is_foreign_device_array(obj)? {
        let (buf, a) = foreign_buffer(obj, origin, what)?;
        if writes && a.readonly {
            return Err(invalid(format!(
                "{what}: the array is read-only (its producer says so), and the node writes it"
            )));
        }
        return Ok((buf, a.dtype));
    }
    Err(invalid(format!(
        "{what}: expected a DeviceBuffer or an array with __cuda_array_interface__ or CUDA \
         __dlpack__, not {}",
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}

/// Whether `obj` is another library's device array that [`foreign_buffer`] takes: it has
/// `__cuda_array_interface__`, or `__dlpack__` with a `__dlpack_device__` in CUDA device or
/// managed memory (a NumPy array's DLPack device is the CPU: not one).
pub(crate) fn is_foreign_device_array(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    if obj.hasattr("__cuda_array_interface__")? {
        return Ok(true);
    }
    Ok(obj.hasattr("__dlpack__")?
        && matches!(
            crate::dlpack::device_of(obj)?,
            Some((crate::dlpack::DL_CUDA | crate::dlpack::DL_CUDA_MANAGED, _))
        ))
}

/// A device buffer over a foreign array's memory (`__cuda_array_interface__`, else DLPack),
/// holding what keeps the memory allocated: the array itself (the interface), or the DLPack
/// tensor taken from it, whose deleter runs when the buffer is released. Every DAG and `Exec`
/// that uses the buffer holds it.
pub(crate) fn foreign_buffer(
    obj: &Bound<'_, PyAny>,
    origin: &Origin,
    what: &str,
) -> PyResult<(TypedBuffer, ForeignArray)> {
    if !obj.hasattr("__cuda_array_interface__")? {
        return dlpack_buffer(obj, origin, what);
    }
    let a = read_cai(obj, what)?;
    let owner: cudagraph::ForeignOwner = Box::new(obj.clone().unbind());
    match origin {
        Origin::Recording(rec) => {
            let buf = TypedBuffer::recording(
                &mut rec.borrow_mut(obj.py()).inner,
                a.dtype,
                a.bytes,
                Some(owner),
            );
            Ok((buf, a))
        }
        Origin::Gpu(device) => {
            if let Some(id) = stated_device(obj, what)? {
                if id != device.ordinal() {
                    return Err(invalid(format!(
                        "{what}: the array is on device {id} but the node's device is {}",
                        device.ordinal()
                    )));
                }
            }
            if let Some(s) = a.stream {
                refuse_in_host_callable(&format!("{what}: synchronising the array's stream"))?;
                // The producer's pending work on the array: waited for now, as the interface
                // asks of a consumer (the graph's launches come later).
                obj.py()
                    .allow_threads(move || -> cudagraph::Result<()> {
                        // SAFETY: `s` is the stream handle the producer gave for this array
                        // just now (read above, `obj` held): the interface asks the consumer to
                        // synchronise on it, so the producer keeps it valid for this call.
                        unsafe {
                            cudagraph::result::runtime::stream_synchronize(
                                s as cudagraph::sys::cudaStream_t,
                            )
                        }
                    })
                    .py_err()?;
            }
            // SAFETY: the interface's contract as this crate states it to callers (README, "The
            // caller's contract"): `data` is `bytes` of memory that stays allocated while the
            // array object lives, and `owner` holds that object. A producer can break this
            // (PyTorch's `resize_`/`set_` free the storage under a live tensor); that is the
            // caller's contract, documented, not something checked here. `from_foreign`
            // checks with CUDA that it is device memory of `device` (or managed memory); the
            // device the array states was compared above too.
            let buf = unsafe { TypedBuffer::from_foreign(device, a.dtype, a.ptr, a.bytes, owner) }
                .py_err()?;
            Ok((buf, a))
        }
    }
}

/// [`foreign_buffer`] for an array with only DLPack (an array-API library's): the tensor is
/// taken from its capsule, checked as the interface is, and owned by the buffer. On a GPU the
/// producer is asked to order its pending work before a stream made for it on the node's
/// device, which is then synchronised, as the interface's stream is; a recording backend asks
/// for no synchronisation (`stream=-1`: no GPU work follows).
fn dlpack_buffer(
    obj: &Bound<'_, PyAny>,
    origin: &Origin,
    what: &str,
) -> PyResult<(TypedBuffer, ForeignArray)> {
    let py = obj.py();
    let array = |d: crate::dlpack::Described| ForeignArray {
        ptr: d.ptr,
        bytes: d.bytes,
        dtype: d.dtype,
        stream: None,
        readonly: d.readonly,
    };
    // The producer may call CUDA to give the capsule (forbidden in a host function).
    refuse_in_host_callable(&format!("{what}: taking a DLPack array"))?;
    match origin {
        Origin::Recording(rec) => {
            let (d, owner) = crate::dlpack::import(obj, -1, what)?;
            let buf = TypedBuffer::recording(
                &mut rec.borrow_mut(py).inner,
                d.dtype,
                d.bytes,
                Some(owner),
            );
            Ok((buf, array(d)))
        }
        Origin::Gpu(device) => {
            if let Some((_, id)) = crate::dlpack::device_of(obj)? {
                if id != device.ordinal() {
                    return Err(invalid(format!(
                        "{what}: the array is on device {id} but the node's device is {}",
                        device.ordinal()
                    )));
                }
            }
            // The stream the producer orders its pending work before: one of the node's device
            // (the legacy default stream, DLPack's 1, is the current device's, which may be
            // another).
            let stream = cudagraph::Stream::new(device).py_err()?;
            let (d, owner) = crate::dlpack::import(obj, stream.raw() as isize, what)?;
            if d.device.1 != device.ordinal() {
                return Err(invalid(format!(
                    "{what}: the DLPack tensor is on device {} but the node's device is {}",
                    d.device.1,
                    device.ordinal()
                )));
            }
            py.allow_threads(|| stream.synchronize()).py_err()?;
            // SAFETY: DLPack's contract: the tensor's `data + byte_offset` is `bytes` of memory
            // that stays allocated until its deleter is called, which `owner` calls when
            // dropped, after the crate's GPU work using the buffer. `from_foreign` checks with
            // CUDA that it is device memory of `device` (or managed memory).
            let buf = unsafe { TypedBuffer::from_foreign(device, d.dtype, d.ptr, d.bytes, owner) }
                .py_err()?;
            Ok((buf, array(d)))
        }
    }
}
