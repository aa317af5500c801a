//! `Module`, `Kernel`, kernel parameter types read from C signatures, and kernel arguments
//! converted from Python objects (CuPy `RawKernel`'s convention for scalars).

use std::sync::Arc;

use cudagraph::{Access, In, InOut, Kernel, KernelArg, Out, Region};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt};

use crate::buffers::{foreign_buffer, is_foreign_device_array, PyDeviceBuffer, PyHostBuffer};
use crate::device::{drop_detached, refuse_in_host_callable, Origin, PyDevice};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};
use crate::graph_nodes::{PyConditional, PyDeviceNode, PyGraphBuffer};

/// One kernel parameter as a C signature declares it.
#[derive(Debug, Clone)]
pub(crate) struct Param {
    /// The declaration, for messages (`float* x`).
    pub text: String,
    /// A pointer (any level).
    pub pointer: bool,
    /// A pointer to `const` (`const float* x`, `float const* x`): the kernel only reads
    /// through it, so a read-only array may be passed.
    pub const_pointee: bool,
    /// The element type (of the pointee, for a pointer); `None` when not a known scalar type
    /// (`void`, a struct, a template parameter).
    pub base: Option<Dtype>,
}

impl Param {
    /// The parameter's size in bytes, when known.
    pub(crate) fn size(&self) -> Option<usize> {
        if self.pointer {
            Some(8)
        } else {
            self.base.map(|d| d.size)
        }
    }

    /// The C type in words (`float*`, `int`).
    fn c_type(&self) -> String {
        let base = self.base.map(|d| d.name()).unwrap_or_else(|| "?".into());
        if self.pointer {
            format!("{base}*")
        } else {
            base
        }
    }
}

const QUALIFIERS: &[&str] = &[
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "struct",
    "__grid_constant__",
];

fn scalar_type(words: &str) -> Option<Dtype> {
    let (kind, size) = match words {
        "float" => ('f', 4),
        "double" => ('f', 8),
        "__half" | "half" => ('f', 2),
        "int" | "signed" | "signed int" | "int32_t" => ('i', 4),
        "unsigned" | "unsigned int" | "uint32_t" => ('u', 4),
        "long" | "long int" | "signed long" | "long long" | "long long int"
        | "signed long long" | "int64_t" | "ptrdiff_t" | "ssize_t" => ('i', 8),
        "unsigned long"
        | "unsigned long int"
        | "unsigned long long"
        | "unsigned long long int"
        | "uint64_t"
        | "size_t" => ('u', 8),
        "short" | "short int" | "signed short" | "int16_t" => ('i', 2),
        "unsigned short" | "unsigned short int" | "uint16_t" => ('u', 2),
        "char" | "signed char" | "int8_t" => ('i', 1),
        "unsigned char" | "uint8_t" => ('u', 1),
        "bool" => ('b', 1),
        "cuFloatComplex" | "cuComplex" | "float2" => ('c', 8),
        "cuDoubleComplex" | "double2" => ('c', 16),
        _ => return None,
    };
    Some(Dtype { kind, size })
}

/// Words that are part of a type, never a parameter's name.
fn is_type_word(w: &str) -> bool {
    matches!(
        w,
        "int" | "char" | "short" | "long" | "signed" | "unsigned" | "float" | "double" | "bool"
    )
}

/// Parses one parameter declaration (`const float* __restrict__ x`).
fn parse_param(decl: &str) -> Param {
    let text = decl.split_whitespace().collect::<Vec<_>>().join(" ");
    let pointer = decl.contains('*') || decl.contains('[');
    let cleaned: String = decl
        .chars()
        .map(|c| {
            if c == '*' || c == '&' || c == '[' || c == ']' {
                ' '
            } else {
                c
            }
        })
        .collect();
    let mut words: Vec<&str> = cleaned
        .split_whitespace()
        .filter(|w| !QUALIFIERS.contains(w))
        .collect();
    // `float x[]`: drop an array size.
    words.retain(|w| !w.chars().all(|c| c.is_ascii_digit()));
    if words.len() >= 2 && !is_type_word(words[words.len() - 1]) {
        words.pop();
    }
    let base = scalar_type(&words.join(" "));
    // `const` before the first `*` (or `[`) qualifies the pointee; after it, the pointer.
    let head = decl.split(['*', '[']).next().unwrap_or("");
    let const_pointee = pointer && head.split_whitespace().any(|w| w == "const");
    Param {
        text,
        pointer,
        const_pointee,
        base,
    }
}

/// Parses a parameter list: `"float* x, float a, int n"` (an empty string or `void`: none).
pub(crate) fn parse_params(list: &str) -> PyResult<Vec<Param>> {
    let list = list.trim();
    if list.is_empty() || list == "void" {
        return Ok(Vec::new());
    }
    if list.contains('<') || list.contains('(') {
        return Err(invalid(format!(
            "cannot read the parameter list `{list}` (templates and function pointers are not \
             read): pass NumPy scalars, whose types are their own"
        )));
    }
    Ok(list.split(',').map(parse_param).collect())
}

/// The parameters of the `__global__` function `name` in CUDA C `source`, when a declaration
/// of it can be read (`extern "C" __global__ void name(float* x, int n)`).
pub(crate) fn find_signature(source: &str, name: &str) -> Option<Vec<Param>> {
    let bytes = source.as_bytes();
    let mut from = 0;
    while let Some(i) = source[from..].find(name).map(|i| i + from) {
        from = i + name.len();
        let before_ok = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let rest = source[from..].trim_start();
        if !before_ok || !rest.starts_with('(') {
            continue;
        }
        // The declaration's start: after the previous `;`, `}` or `{`.
        let start = source[..i]
            .rfind([';', '}', '{'])
            .map(|s| s + 1)
            .unwrap_or(0);
        if !source[start..i].contains("__global__") {
            continue;
        }
        let open = source.len() - rest.len();
        let close = source[open..].find(')')? + open;
        return parse_params(&source[open + 1..close]).ok();
    }
    None
}

/// A loaded module of kernels (compiled from CUDA C with NVRTC, loaded at run time).
#[pyclass(module = "cudagraph._cudagraph", name = "Module", frozen)]
pub(crate) struct PyCudaModule {
    inner: Option<cudagraph::Module>,
    source: String,
    device: cudagraph::Device,
}

impl Drop for PyCudaModule {
    fn drop(&mut self) {
        if let Some(m) = self.inner.take() {
            drop_detached(m);
        }
    }
}

#[pymethods]
impl PyCudaModule {
    /// Compiles CUDA C ``source`` with NVRTC for ``device`` (``Device(0)``) and loads it.
    /// ``options`` are NVRTC options (``["-DN=4", "--use_fast_math"]``). Raises
    /// ``CompileError`` with the compiler's log, ``LibraryError`` when NVRTC is missing,
    /// ``NoGpuError`` without a GPU. ``device_runtime``: compile relocatable code and link it
    /// with the toolkit's device runtime (``libcudadevrt.a``), for kernels using it.
    #[staticmethod]
    #[pyo3(signature = (source, device=None, options=None, name=None, *, device_runtime=false))]
    fn from_source(
        py: Python<'_>,
        source: String,
        device: Option<PyRef<'_, PyDevice>>,
        options: Option<Vec<String>>,
        name: Option<String>,
        device_runtime: bool,
    ) -> PyResult<Self> {
        refuse_in_host_callable("Module.from_source()")?;
        let device = match device {
            Some(d) => d.inner.clone(),
            None => crate::device::open_device(0)?,
        };
        let mut opts = cudagraph::CompileOptions::default();
        if let Some(o) = options {
            opts.options = o;
        }
        if let Some(n) = name {
            opts.name = n;
        }
        if device_runtime {
            opts.kind = cudagraph::CodeKind::DeviceRuntime;
        }
        let (d, src) = (device.clone(), source.clone());
        let m = py
            .allow_threads(move || cudagraph::Module::from_source_with(&d, &src, &opts))
            .py_err()?;
        Ok(PyCudaModule {
            inner: Some(m),
            source,
            device,
        })
    }

    /// The kernel ``name`` (an ``extern "C"`` name). Its parameter types are read from the
    /// source's declaration, or from ``signature`` (``"float* x, float a, int n"``); where they
    /// are known, plain Python numbers are accepted as arguments and array dtypes are checked.
    #[pyo3(signature = (name, signature=None))]
    fn kernel(&self, name: &str, signature: Option<&str>) -> PyResult<PyKernel> {
        let module = self.inner.as_ref().expect("taken only by Drop");
        let k = module.kernel(name).py_err()?;
        let types = match signature {
            Some(s) => Some(parse_params(s)?),
            None => find_signature(&self.source, name),
        };
        PyKernel::new(k, types, Origin::Gpu(self.device.clone()))
    }
}

/// A kernel: its name and parameter layout (from the cubin), and its parameter types when a
/// C signature was read.
#[pyclass(module = "cudagraph._cudagraph", name = "Kernel", frozen)]
pub(crate) struct PyKernel {
    pub(crate) kernel: Option<Kernel>,
    pub(crate) types: Option<Arc<Vec<Param>>>,
    pub(crate) origin: Origin,
}

impl Drop for PyKernel {
    fn drop(&mut self) {
        if let Some(k) = self.kernel.take() {
            drop_detached(k);
        }
    }
}

impl PyKernel {
    pub(crate) fn new(kernel: Kernel, types: Option<Vec<Param>>, origin: Origin) -> PyResult<Self> {
        if let Some(t) = &types {
            let sizes: Vec<usize> = kernel.params().iter().map(|p| p.size).collect();
            let ok = t.len() == sizes.len()
                && t.iter()
                    .zip(&sizes)
                    .all(|(p, &s)| p.size().is_none_or(|ps| ps == s));
            if !ok {
                return Err(invalid(format!(
                    "kernel `{}`: the signature ({}) does not match its parameters' sizes {:?}",
                    kernel.name(),
                    t.iter()
                        .map(|p| p.text.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    sizes
                )));
            }
        }
        Ok(PyKernel {
            kernel: Some(kernel),
            types: types.map(Arc::new),
            origin,
        })
    }

    pub(crate) fn kernel(&self) -> &Kernel {
        self.kernel.as_ref().expect("taken only by Drop")
    }

    pub(crate) fn info(&self) -> KernelInfo {
        KernelInfo {
            name: self.kernel().name().to_string(),
            types: self.types.clone(),
            origin: self.origin.clone(),
        }
    }
}

#[pymethods]
impl PyKernel {
    /// The kernel's name.
    #[getter]
    fn name(&self) -> String {
        self.kernel().name().to_string()
    }

    /// Each parameter's size in bytes.
    #[getter]
    fn param_sizes(&self) -> Vec<usize> {
        self.kernel().params().iter().map(|p| p.size).collect()
    }

    /// Each parameter's C type (``float*``, ``int32``), or ``None`` when not known.
    #[getter]
    fn param_types(&self) -> Option<Vec<String>> {
        self.types
            .as_ref()
            .map(|t| t.iter().map(Param::c_type).collect())
    }

    fn __repr__(&self) -> String {
        format!("Kernel('{}', params={:?})", self.name(), self.param_sizes())
    }
}

/// What argument conversion needs of a kernel (kept per node for `Exec.set_kernel_args`).
#[derive(Clone)]
pub(crate) struct KernelInfo {
    pub name: String,
    pub types: Option<Arc<Vec<Param>>>,
    pub origin: Origin,
}

/// A converted argument: a buffer's region (holding its allocation) or a value.
pub(crate) enum Prepared {
    Region(Region),
    /// A region marked `In`, `Out` or `InOut` (for dependency inference).
    Marked(Region, Access),
    Value(KernelArg<'static>),
}

/// The crate's arguments, borrowing the prepared ones.
pub(crate) fn as_args(p: &[Prepared]) -> Vec<KernelArg<'_>> {
    p.iter()
        .map(|a| match a {
            Prepared::Region(r) => KernelArg::region(r),
            Prepared::Marked(r, Access::Read) => KernelArg::from(In(r)),
            Prepared::Marked(r, Access::Write) => KernelArg::from(Out(r)),
            Prepared::Marked(r, Access::ReadWrite) => KernelArg::from(InOut(r)),
            Prepared::Value(v) => v.clone(),
        })
        .collect()
}

fn value_of(d: Dtype, b: &[u8]) -> PyResult<KernelArg<'static>> {
    fn read<T: bytemuck::Pod + Send + Sync>(b: &[u8]) -> T {
        bytemuck::pod_read_unaligned(b)
    }
    if b.len() != d.size {
        return Err(invalid(format!("{} bytes for a {}", b.len(), d.name())));
    }
    Ok(match (d.kind, d.size) {
        ('f', 4) => KernelArg::value(read::<f32>(b)),
        ('f', 8) => KernelArg::value(read::<f64>(b)),
        ('i', 1) => KernelArg::value(read::<i8>(b)),
        ('i', 2) => KernelArg::value(read::<i16>(b)),
        ('i', 4) => KernelArg::value(read::<i32>(b)),
        ('i', 8) => KernelArg::value(read::<i64>(b)),
        ('c', 8) => KernelArg::value(read::<[f32; 2]>(b)),
        ('c', 16) => KernelArg::value(read::<[f64; 2]>(b)),
        (_, 1) => KernelArg::value(read::<u8>(b)),
        (_, 2) => KernelArg::value(read::<u16>(b)),
        (_, 4) => KernelArg::value(read::<u32>(b)),
        (_, 8) => KernelArg::value(read::<u64>(b)),
        _ => return Err(invalid(format!("unsupported scalar type {}", d.name()))),
    })
}

/// A plain Python number converted to the parameter's known scalar type.
fn plain_number(obj: &Bound<'_, PyAny>, d: Dtype, at: &str) -> PyResult<KernelArg<'static>> {
    let is_float = obj.is_instance_of::<PyFloat>();
    let out_of_range = || invalid(format!("{at}: {obj} does not fit in {}", d.name()));
    let bytes: Vec<u8> = match d.kind {
        'f' => {
            let v: f64 = obj.extract()?;
            match d.size {
                4 => (v as f32).to_le_bytes().to_vec(),
                8 => v.to_le_bytes().to_vec(),
                _ => {
                    return Err(invalid(format!(
                        "{at}: pass a numpy.float16 for a half-precision parameter"
                    )))
                }
            }
        }
        'i' | 'u' | 'b' if is_float => {
            return Err(invalid(format!(
                "{at}: a float given for a parameter of type {}",
                d.name()
            )))
        }
        'b' => vec![u8::from(obj.extract::<bool>()?)],
        'i' => {
            let v: i64 = obj.extract().map_err(|_| out_of_range())?;
            let b = v.to_le_bytes();
            let fits = match d.size {
                1 => i8::try_from(v).is_ok(),
                2 => i16::try_from(v).is_ok(),
                4 => i32::try_from(v).is_ok(),
                _ => true,
            };
            if !fits {
                return Err(out_of_range());
            }
            b[..d.size].to_vec()
        }
        'u' => {
            let v: u64 = obj.extract().map_err(|_| out_of_range())?;
            if d.size < 8 && v >> (d.size * 8) != 0 {
                return Err(out_of_range());
            }
            v.to_le_bytes()[..d.size].to_vec()
        }
        _ => {
            return Err(invalid(format!(
                "{at}: pass a NumPy scalar of type {} (numpy.{}(...))",
                d.name(),
                d.name()
            )))
        }
    };
    value_of(d, &bytes)
}

/// Converts Python arguments for `kernel`: arrays (cudagraph buffers, objects with
/// `__cuda_array_interface__`) for pointer parameters, NumPy scalars for values, and plain
/// Python numbers where the parameter's type is known. Foreign arrays are wrapped for
/// `origin` (the kernel's device, or its recording backend).
pub(crate) fn prepare_args(info: &KernelInfo, args: &Bound<'_, PyAny>) -> PyResult<Vec<Prepared>> {
    let mut out = Vec::new();
    for (i, item) in args.try_iter()?.enumerate() {
        let obj = item?;
        let at = format!("kernel `{}` argument {i}", info.name);
        let param = info.types.as_ref().and_then(|t| t.get(i));
        out.push(prepare_one(&obj, param, info, &at)?);
    }
    Ok(out)
}

fn check_pointer(param: Option<&Param>, dtype: Dtype, at: &str) -> PyResult<()> {
    let Some(p) = param else { return Ok(()) };
    if !p.pointer {
        return Err(invalid(format!(
            "{at}: an array given for the value parameter `{}`",
            p.text
        )));
    }
    match p.base {
        // `void*`, `char*`, `unsigned char*` and unknown pointees take any array.
        None => Ok(()),
        Some(b) if b.size == 1 && b.kind != 'b' => Ok(()),
        Some(b) if b == dtype => Ok(()),
        Some(b) => Err(invalid(format!(
            "{at}: parameter `{}` points to {} but the array holds {}",
            p.text,
            b.name(),
            dtype.name()
        ))),
    }
}

pub(crate) fn prepare_one(
    obj: &Bound<'_, PyAny>,
    param: Option<&Param>,
    info: &KernelInfo,
    at: &str,
) -> PyResult<Prepared> {
    if let Some((array, access)) = crate::infer::marked(obj) {
        if access.writes() && param.is_some_and(|p| p.const_pointee) {
            return Err(invalid(format!(
                "{at}: marked as written, but parameter `{}` is a pointer to const",
                param.map(|p| p.text.as_str()).unwrap_or_default()
            )));
        }
        return match prepare_one(&array, param, info, at)? {
            Prepared::Region(r) => Ok(Prepared::Marked(r, access)),
            _ => Err(invalid(format!(
                "{at}: In, Out and InOut mark a buffer argument (a DeviceBuffer, HostBuffer or \
                 another library's array), not {}",
                array
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))),
        };
    }
    if let Ok(b) = obj.downcast::<PyDeviceBuffer>() {
        let b = b.get();
        check_pointer(param, b.dtype, at)?;
        return Ok(Prepared::Region(b.buf().region()));
    }
    if let Ok(h) = obj.downcast::<PyHostBuffer>() {
        let h = h.get();
        check_pointer(param, h.dtype, at)?;
        return Ok(Prepared::Region(h.region()));
    }
    if let Ok(g) = obj.downcast::<PyGraphBuffer>() {
        let g = g.get();
        check_pointer(param, g.dtype, at)?;
        return Ok(Prepared::Value(g.buf.arg()));
    }
    // Handles passed by value (8 bytes), written in at lowering.
    let handle = if let Ok(c) = obj.downcast::<PyConditional>() {
        Some(("Conditional", KernelArg::conditional(&c.get().inner)))
    } else if let Ok(n) = obj.downcast::<PyDeviceNode>() {
        Some(("DeviceNode", KernelArg::device_node(&n.get().inner)))
    } else {
        None
    };
    if let Some((what, arg)) = handle {
        if let Some(p) = param.filter(|p| p.pointer) {
            return Err(invalid(format!(
                "{at}: a {what} given for the pointer parameter `{}` (it is passed by value)",
                p.text
            )));
        }
        return Ok(Prepared::Value(arg));
    }
    if is_foreign_device_array(obj)? {
        let (buf, a) = foreign_buffer(obj, &info.origin, at)?;
        check_pointer(param, a.dtype, at)?;
        if a.readonly {
            match param {
                Some(p) if p.const_pointee => {}
                Some(p) => {
                    return Err(invalid(format!(
                        "{at}: the array is read-only (its producer says so) \
                         but parameter `{}` is not a pointer to const",
                        p.text
                    )))
                }
                None => {
                    return Err(invalid(format!(
                        "{at}: the array is read-only (its producer says so) \
                         and the kernel's parameter types are not known; give the kernel a \
                         signature whose parameter is `const T*`"
                    )))
                }
            }
        }
        return Ok(Prepared::Region(buf.region()));
    }
    // NumPy scalars (and 0-d arrays): their dtype is their C type. First: `numpy.float64`
    // is also a Python float.
    if obj.hasattr("dtype")? && obj.hasattr("tobytes")? {
        let ndim: usize = obj.getattr("ndim").and_then(|n| n.extract()).unwrap_or(1);
        if ndim == 0 {
            let d = Dtype::from_py(&obj.getattr("dtype")?)?;
            if let Some(p) = param {
                if p.pointer {
                    return Err(invalid(format!(
                        "{at}: a scalar given for the pointer parameter `{}`",
                        p.text
                    )));
                }
                if let Some(b) = p.base {
                    if b != d {
                        return Err(invalid(format!(
                            "{at}: a numpy.{} given for parameter `{}` of type {}",
                            d.name(),
                            p.text,
                            b.name()
                        )));
                    }
                }
            }
            let bytes: Vec<u8> = obj.call_method0("tobytes")?.extract()?;
            return value_of(d, &bytes).map(Prepared::Value);
        }
        return Err(invalid(format!(
            "{at}: a host array cannot be a kernel argument; copy it to a DeviceBuffer \
             (DeviceBuffer.from_numpy) or pass a device array"
        )));
    }
    // Plain Python numbers (bool before int: bool is an int).
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyInt>()
        || obj.is_instance_of::<PyFloat>()
    {
        let kind = if obj.is_instance_of::<PyFloat>() {
            "float"
        } else {
            "int"
        };
        return match param {
            Some(p) if p.pointer => Err(invalid(format!(
                "{at}: a Python {kind} given for the pointer parameter `{}`",
                p.text
            ))),
            Some(Param { base: Some(d), .. }) => plain_number(obj, *d, at).map(Prepared::Value),
            _ => Err(invalid(format!(
                "{at}: a plain Python {kind} has no C type here (the kernel's parameter types \
                 are not known); pass a NumPy scalar such as numpy.float32(2.0) or \
                 numpy.int32(5), as with CuPy's RawKernel, or give the kernel a signature"
            ))),
        };
    }
    Err(invalid(format!(
        "{at}: cannot pass a {} to a kernel (expected a DeviceBuffer, an array with \
         __cuda_array_interface__ or CUDA __dlpack__, a GraphBuffer, a Conditional, a DeviceNode or a NumPy \
         scalar)",
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_read_from_source() {
        let src = r#"
            __device__ float helper(float v) { return v; }
            extern "C" __global__ void scale(float* __restrict__ x, const float a, int n) {}
            extern "C" __global__ void other(unsigned long long* c, size_t m) {}
        "#;
        let p = find_signature(src, "scale").unwrap();
        assert_eq!(p.len(), 3);
        assert!(!p[0].const_pointee && !p[1].const_pointee);
        assert!(p[0].pointer && p[0].base == Some(Dtype::F32));
        assert!(!p[1].pointer && p[1].base == Some(Dtype::F32));
        assert_eq!(p[2].base, Some(Dtype { kind: 'i', size: 4 }));
        let q = find_signature(src, "other").unwrap();
        assert_eq!(q[0].base, Some(Dtype { kind: 'u', size: 8 }));
        assert_eq!(q[1].size(), Some(8));
        assert!(find_signature(src, "helper").is_none(), "not a kernel");
        assert!(find_signature(src, "missing").is_none());
    }

    #[test]
    fn unknown_types_stay_unknown() {
        let p = parse_params("MyStruct s, void* v, int").unwrap();
        assert_eq!(p[0].base, None);
        assert!(p[1].pointer && p[1].base.is_none());
        assert_eq!(p[2].base, Some(Dtype { kind: 'i', size: 4 }));
    }

    #[test]
    fn const_pointees_are_told_from_const_pointers() {
        let p = parse_params(
            "const float* a, float const* b, float* const c, const float d[], const int n",
        )
        .unwrap();
        let c: Vec<bool> = p.iter().map(|p| p.const_pointee).collect();
        assert_eq!(c, [true, true, false, true, false]);
    }
}
