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

/// Adds the product for the operands' element type: float32, float64, complex64 or complex128.
fn add_typed(
    dag: &mut cudagraph::Dag,
    blas: &Blas,
    shape: &Shape,
    dtype: Dtype,
    [a, b, c]: [&TypedBuffer; 3],
    alpha: &Bound<'_, PyAny>,
    beta: &Bound<'_, PyAny>,
) -> PyResult<cudagraph::NodeId> {
    /// `buf` as elements of `$t` (the stand-in of the dtype's size, viewed as the real type).
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
    let real = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<f64> {
        v.extract::<f64>()
            .map_err(|_| invalid(format!("{what} must be a real number for {}", dtype.name())))
    };
    let complex = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<Complex64> {
        let z = v
            .py()
            .get_type::<PyComplex>()
            .call1((v,))
            .map_err(|_| invalid(format!("{what} must be a number for {}", dtype.name())))?;
        let z = z.downcast::<PyComplex>()?;
        Ok(Complex64::new(z.real(), z.imag()))
    };
    let r = match (dtype.kind, dtype.size) {
        ('f', 4) => {
            let (a, b, c) = views!(B4, f32);
            let g = shape.gemm(real(alpha, "alpha")? as f32, real(beta, "beta")? as f32);
            dag.add_gemm(blas, &g, &a, &b, &c)
        }
        ('f', 8) => {
            let (a, b, c) = views!(B8, f64);
            let g = shape.gemm(real(alpha, "alpha")?, real(beta, "beta")?);
            dag.add_gemm(blas, &g, &a, &b, &c)
        }
        ('c', 8) => {
            let (a, b, c) = views!(B8, Complex32);
            let (al, be) = (complex(alpha, "alpha")?, complex(beta, "beta")?);
            let g = shape.gemm(
                Complex32::new(al.re as f32, al.im as f32),
                Complex32::new(be.re as f32, be.im as f32),
            );
            dag.add_gemm(blas, &g, &a, &b, &c)
        }
        ('c', 16) => {
            let (a, b, c) = views!(B16, Complex64);
            let g = shape.gemm(complex(alpha, "alpha")?, complex(beta, "beta")?);
            dag.add_gemm(blas, &g, &a, &b, &c)
        }
        _ => {
            return Err(invalid(format!(
                "GEMM of {}: cuBLAS products here are of float32, float64, complex64 or \
                 complex128",
                dtype.name()
            )))
        }
    };
    r.py_err()
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
    /// device than ``blas``'s, ``c`` the buffer of ``a`` or ``b``, mixed dtypes.
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
        let origin = match &self.backend {
            Some(o) => o.clone(),
            None => blas.origin.clone(),
        };
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
        let id = add_typed(
            self.dag_mut(),
            blas.blas(),
            &shape,
            da,
            [&ta, &tb, &tc],
            alpha.unwrap_or(&one),
            beta.unwrap_or(&zero),
        )?;
        Ok(self.named(id, name))
    }
}
