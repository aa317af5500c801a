//! cuBLAS matrix products as nodes: `Blas`, `Dag.add_gemm`.

use cudagraph::{Blas, DeviceBuffer, Gemm, GemmScalar, Transpose};
use num_complex::{Complex32, Complex64};
use pyo3::prelude::*;
use pyo3::types::PyComplex;

use crate::buffers::device_operand;
use crate::dag::{PyDag, PyNode};
use crate::device::{drop_detached, refuse_in_host_callable, Origin, PyDevice};
use crate::dtype::Dtype;
use crate::errors::{invalid, IntoPy};
use crate::typed::TypedBuffer;

/// A cuBLAS handle of one device (``Blas(device)``, ``Device(0)`` when not given; cuBLAS is
/// loaded at the first one). GEMM nodes share it: each node records its product on it at
/// lowering, with the node's own workspace. ``RecordingBackend.blas()`` gives a placeholder for
/// DAGs lowered there.
#[pyclass(module = "cudagraph._cudagraph", name = "Blas", frozen)]
pub(crate) struct PyBlas {
    inner: Option<Blas>,
    origin: Origin,
}

impl Drop for PyBlas {
    fn drop(&mut self) {
        if let Some(b) = self.inner.take() {
            drop_detached(b);
        }
    }
}

impl PyBlas {
    pub(crate) fn placeholder(blas: Blas, origin: Origin) -> Self {
        PyBlas {
            inner: Some(blas),
            origin,
        }
    }

    fn blas(&self) -> &Blas {
        self.inner.as_ref().expect("taken only by Drop")
    }
}

#[pymethods]
impl PyBlas {
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(py: Python<'_>, device: Option<PyRef<'_, PyDevice>>) -> PyResult<Self> {
        refuse_in_host_callable("Blas()")?;
        let device = match device {
            Some(d) => d.inner.clone(),
            None => crate::device::open_device(0)?,
        };
        let d = device.clone();
        let blas = py.allow_threads(move || Blas::new(&d)).py_err()?;
        Ok(PyBlas {
            inner: Some(blas),
            origin: Origin::Gpu(device),
        })
    }

    /// cuBLAS's version (130000 and up for cuBLAS 13.0); an error for a placeholder.
    #[getter]
    fn version(&self) -> PyResult<i32> {
        self.blas().version().py_err()
    }

    fn __repr__(&self) -> String {
        format!("Blas(device={:?})", self.blas().key())
    }
}

/// `"n"`, `"t"` or `"c"` (either case; also ``False``/``True`` for no transpose / transpose).
fn transpose(obj: &Bound<'_, PyAny>, which: &str) -> PyResult<Transpose> {
    if let Ok(b) = obj.extract::<bool>() {
        return Ok(if b { Transpose::Yes } else { Transpose::No });
    }
    let s: String = obj.extract().map_err(|_| {
        invalid(format!(
            "{which}: expected \"n\", \"t\", \"c\" or a bool, not {obj}"
        ))
    })?;
    match s.to_ascii_lowercase().as_str() {
        "n" => Ok(Transpose::No),
        "t" => Ok(Transpose::Yes),
        "c" => Ok(Transpose::Conjugate),
        _ => Err(invalid(format!(
            "{which} = {s:?}: expected \"n\" (as stored), \"t\" (transposed) or \"c\" \
             (conjugate transposed)"
        ))),
    }
}

/// The product's settings, as given.
struct Shape {
    m: usize,
    n: usize,
    k: usize,
    trans_a: Transpose,
    trans_b: Transpose,
    lda: Option<usize>,
    ldb: Option<usize>,
    ldc: Option<usize>,
    workspace_bytes: Option<usize>,
}

impl Shape {
    fn gemm<T: GemmScalar>(&self, alpha: T, beta: T) -> Gemm<T> {
        let mut g = Gemm::new(self.m, self.n, self.k);
        g.trans_a = self.trans_a;
        g.trans_b = self.trans_b;
        g.alpha = alpha;
        g.beta = beta;
        g.lda = self.lda;
        g.ldb = self.ldb;
        g.ldc = self.ldc;
        if let Some(w) = self.workspace_bytes {
            g.workspace_bytes = w;
        }
        g
    }
}

/// `alpha` and `beta` as the operands' element type.
enum Scalars {
    F32(f32, f32),
    F64(f64, f64),
    C32(Complex32, Complex32),
    C64(Complex64, Complex64),
}

impl Scalars {
    /// Reads `alpha` and `beta` for `dtype` (float32, float64, complex64 or complex128).
    fn read(dtype: Dtype, alpha: &Bound<'_, PyAny>, beta: &Bound<'_, PyAny>) -> PyResult<Self> {
        let real = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<f64> {
            v.extract::<f64>()
                .map_err(|_| invalid(format!("{what} must be a real number for {}", dtype.name())))
        };
        let complex = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<Complex64> {
            let z =
                v.py().get_type::<PyComplex>().call1((v,)).map_err(|_| {
                    invalid(format!("{what} must be a number for {}", dtype.name()))
                })?;
            let z = z.downcast::<PyComplex>()?;
            Ok(Complex64::new(z.real(), z.imag()))
        };
        let narrow = |z: Complex64| Complex32::new(z.re as f32, z.im as f32);
        Ok(match (dtype.kind, dtype.size) {
            ('f', 4) => Scalars::F32(real(alpha, "alpha")? as f32, real(beta, "beta")? as f32),
            ('f', 8) => Scalars::F64(real(alpha, "alpha")?, real(beta, "beta")?),
            ('c', 8) => Scalars::C32(
                narrow(complex(alpha, "alpha")?),
                narrow(complex(beta, "beta")?),
            ),
            ('c', 16) => Scalars::C64(complex(alpha, "alpha")?, complex(beta, "beta")?),
            _ => {
                return Err(invalid(format!(
                    "GEMM of {}: cuBLAS products here are of float32, float64, complex64 or \
                     complex128",
                    dtype.name()
                )))
            }
        })
    }
}

/// Adds the product of the operands, as elements of the type `scalars` are of (its workspace is
/// allocated here: call without the GIL).
fn add_typed(
    dag: &mut cudagraph::Dag,
    blas: &Blas,
    shape: &Shape,
    scalars: Scalars,
    [a, b, c]: [&TypedBuffer; 3],
) -> cudagraph::Result<cudagraph::NodeId> {
    /// The operands as elements of `$t` (the stand-in of the dtype's size, viewed as `$t`).
    macro_rules! views {
        ($variant:ident, $t:ty) => {{
            let view = |x: &TypedBuffer| -> DeviceBuffer<$t> {
                match x {
                    TypedBuffer::$variant(d) => d.view_as::<$t>(),
                    _ => unreachable!("operands of one dtype are one variant"),
                }
            };
            (view(a), view(b), view(c))
        }};
    }
    match scalars {
        Scalars::F32(alpha, beta) => {
            let (a, b, c) = views!(B4, f32);
            dag.add_gemm(blas, &shape.gemm(alpha, beta), &a, &b, &c)
        }
        Scalars::F64(alpha, beta) => {
            let (a, b, c) = views!(B8, f64);
            dag.add_gemm(blas, &shape.gemm(alpha, beta), &a, &b, &c)
        }
        Scalars::C32(alpha, beta) => {
            let (a, b, c) = views!(B8, Complex32);
            dag.add_gemm(blas, &shape.gemm(alpha, beta), &a, &b, &c)
        }
        Scalars::C64(alpha, beta) => {
            let (a, b, c) = views!(B16, Complex64);
            dag.add_gemm(blas, &shape.gemm(alpha, beta), &a, &b, &c)
        }
    }
}

#[pymethods]
impl PyDag {
    /// Adds a cuBLAS matrix product ``C = alpha·op(A)·op(B) + beta·C`` (``cublasGemmEx``) on
    /// ``blas``'s device: ``op(A)`` is ``m × k``, ``op(B)`` ``k × n``, ``C`` ``m × n``.
    ///
    /// cuBLAS is column-major: a matrix's leading dimension (``lda``, ``ldb``, ``ldc``; the
    /// stored row count when not given) is the distance between its columns, in elements. For
    /// C-ordered (row-major) NumPy-style arrays ``A`` (``m × k``), ``B`` (``k × n``) and ``C``
    /// (``m × n``), ``C = A·B`` is ``add_gemm(blas, B, A, C, m=n, n=m, k=k)``: the column-major
    /// view of a row-major matrix is its transpose, and ``Cᵀ = Bᵀ·Aᵀ``.
    ///
    /// ``a``, ``b``, ``c``: ``DeviceBuffer``s or other libraries' device arrays, all float32,
    /// float64, complex64 or complex128; ``c`` is written, and is neither ``a`` nor ``b``.
    /// ``trans_a``, ``trans_b``: ``"n"``, ``"t"`` or ``"c"`` (conjugate), or a bool.
    /// ``alpha``, ``beta``: numbers (complex for complex types). ``workspace_bytes``: the
    /// node's own cuBLAS workspace (allocated now; cuBLAS's default size when not given).
    ///
    /// Errors (``ValidationError`` naming the node): a size of zero, a leading dimension below
    /// the stored row count, a buffer shorter than the matrix it holds, buffers of another
    /// device than ``blas``'s, ``c`` overlapping ``a`` or ``b`` (by address), mixed dtypes.
    ///
    /// The node holds ``blas``, the buffers and its workspace. ``alpha``, ``beta`` and the
    /// buffers are recorded at capture: change them by building the DAG again and
    /// ``Exec.update(dag)`` (which may need a new instantiation, as cuBLAS may pick other
    /// kernels); ``Exec.set_enabled`` switches the node.
    #[pyo3(signature = (blas, a, b, c, *, m, n, k, trans_a=None, trans_b=None, alpha=None,
        beta=None, lda=None, ldb=None, ldc=None, workspace_bytes=None, name=None))]
    #[allow(clippy::too_many_arguments)] // reason: the Python signature's keywords
    fn add_gemm(
        &mut self,
        py: Python<'_>,
        blas: PyRef<'_, PyBlas>,
        a: &Bound<'_, PyAny>,
        b: &Bound<'_, PyAny>,
        c: &Bound<'_, PyAny>,
        m: usize,
        n: usize,
        k: usize,
        trans_a: Option<&Bound<'_, PyAny>>,
        trans_b: Option<&Bound<'_, PyAny>>,
        alpha: Option<&Bound<'_, PyAny>>,
        beta: Option<&Bound<'_, PyAny>>,
        lda: Option<usize>,
        ldb: Option<usize>,
        ldc: Option<usize>,
        workspace_bytes: Option<usize>,
        name: Option<String>,
    ) -> PyResult<PyNode> {
        // The node's device is the handle's: foreign operands are wrapped for it.
        let origin = blas.origin.clone();
        if matches!(origin, Origin::Gpu(_)) {
            // Its workspace is allocated and zeroed now (CUDA calls, a wait).
            refuse_in_host_callable("Dag.add_gemm()")?;
        }
        let (ta, da) = device_operand(a, &origin, "GEMM a", false)?;
        let (tb, db) = device_operand(b, &origin, "GEMM b", false)?;
        let (tc, dc) = device_operand(c, &origin, "GEMM c", true)?;
        if da != db || da != dc {
            return Err(invalid(format!(
                "GEMM: a, b and c hold {}, {} and {}; a product is of one dtype",
                da.name(),
                db.name(),
                dc.name()
            )));
        }
        let shape = Shape {
            m,
            n,
            k,
            trans_a: trans_a
                .map(|t| transpose(t, "trans_a"))
                .transpose()?
                .unwrap_or_default(),
            trans_b: trans_b
                .map(|t| transpose(t, "trans_b"))
                .transpose()?
                .unwrap_or_default(),
            lda,
            ldb,
            ldc,
            workspace_bytes,
        };
        let one = 1i32.into_pyobject(py)?.into_any();
        let zero = 0i32.into_pyobject(py)?.into_any();
        let scalars = Scalars::read(da, alpha.unwrap_or(&one), beta.unwrap_or(&zero))?;
        let blas = blas.blas();
        let dag = self.dag_mut();
        // Without the GIL: the workspace's allocation waits for the device, whose queued host
        // nodes may need the GIL.
        let id = py
            .allow_threads(|| add_typed(dag, blas, &shape, scalars, [&ta, &tb, &tc]))
            .py_err()?;
        Ok(self.named(id, name))
    }
}
