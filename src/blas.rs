//! cuBLAS for GEMM nodes: [`Blas`] (an owning cuBLAS handle of one device) and what a matrix
//! product is ([`Gemm`], [`Transpose`], [`GemmScalar`]). The node itself is
//! [`Dag::add_gemm`](crate::Dag::add_gemm).
//!
//! cuBLAS (`libcublas.so.13`, with `libcublasLt.so.13`) is loaded at run time like the other
//! libraries ([`load::cublas`](crate::load::cublas)); without it, [`Blas::new`] fails with
//! [`Error::LibraryNotFound`] naming the library that is missing.
//!
//! # Column-major
//!
//! cuBLAS, and so [`Gemm`], is **column-major**: element `(i, j)` of a matrix with leading
//! dimension `ld` is at index `i + j * ld` (`ld` at least the number of rows). A row-major
//! `r × c` matrix with row stride `ld` is, read column-major, its transpose (`c × r`, leading
//! dimension `ld`). To compute the row-major product `C = A · B` (`A` is `m × k`, `B` is
//! `k × n`, all row-major) ask for the column-major `Cᵀ = Bᵀ · Aᵀ`: swap the operands and `m`
//! with `n`, `Gemm::new(n, m, k)` with `a` = B and `b` = A (leading dimensions: the row strides).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use num_complex::{Complex32, Complex64};

use crate::device::{Device, DeviceKey, Owner};
use crate::error::{Error, Result};
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, MemorySpace};
use crate::result::cublas as cb;
use crate::sys;

/// The workspace a GEMM node gets unless [`Gemm::workspace_bytes`] says otherwise: 4 MiB
/// (cuBLAS's recommendation for GPUs before Hopper; it recommends 32 MiB on Hopper and
/// Blackwell, where a larger workspace lets it pick faster kernels).
pub const DEFAULT_WORKSPACE_BYTES: usize = 4 << 20;

/// What is done to a matrix before the product: `op(X)` of cuBLAS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Transpose {
    /// `X` itself (`CUBLAS_OP_N`).
    #[default]
    No,
    /// `Xᵀ` (`CUBLAS_OP_T`).
    Yes,
    /// The conjugate transpose `Xᴴ` (`CUBLAS_OP_C`; for real types the same as [`Transpose::Yes`]).
    Conjugate,
}

impl Transpose {
    pub(crate) fn raw(self) -> sys::cublasOperation_t {
        match self {
            Transpose::No => sys::cublasOperation_t::CUBLAS_OP_N,
            Transpose::Yes => sys::cublasOperation_t::CUBLAS_OP_T,
            Transpose::Conjugate => sys::cublasOperation_t::CUBLAS_OP_C,
        }
    }
    /// `N`, `T` or `C`, as cuBLAS names them.
    pub fn letter(self) -> char {
        match self {
            Transpose::No => 'N',
            Transpose::Yes => 'T',
            Transpose::Conjugate => 'C',
        }
    }
    /// The rows and columns of the stored matrix whose `op` is `rows × cols`.
    pub(crate) fn stored(self, rows: usize, cols: usize) -> (usize, usize) {
        match self {
            Transpose::No => (rows, cols),
            Transpose::Yes | Transpose::Conjugate => (cols, rows),
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for num_complex::Complex32 {}
    impl Sealed for num_complex::Complex64 {}
}

/// An element type GEMM nodes take: `f32` (SGEMM), `f64` (DGEMM), [`Complex32`] (CGEMM) and
/// [`Complex64`] (ZGEMM). Products accumulate in the element's own precision
/// (`CUBLAS_COMPUTE_32F` / `CUBLAS_COMPUTE_64F`: no TF32 or reduced-precision shortcut).
pub trait GemmScalar: DeviceRepr + Copy + std::fmt::Debug + sealed::Sealed {
    /// The value 1.
    const ONE: Self;
    /// The value 0.
    const ZERO: Self;
    /// cuBLAS's name for the type's BLAS prefix (`S`, `D`, `C`, `Z`).
    const PREFIX: char;
    #[doc(hidden)]
    const DATA_TYPE: sys::cudaDataType;
    #[doc(hidden)]
    const COMPUTE: sys::cublasComputeType_t;
}

impl GemmScalar for f32 {
    const ONE: Self = 1.0;
    const ZERO: Self = 0.0;
    const PREFIX: char = 'S';
    const DATA_TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_32F;
    const COMPUTE: sys::cublasComputeType_t = sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
}

impl GemmScalar for f64 {
    const ONE: Self = 1.0;
    const ZERO: Self = 0.0;
    const PREFIX: char = 'D';
    const DATA_TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_R_64F;
    const COMPUTE: sys::cublasComputeType_t = sys::cublasComputeType_t::CUBLAS_COMPUTE_64F;
}

impl GemmScalar for Complex32 {
    const ONE: Self = Complex32::new(1.0, 0.0);
    const ZERO: Self = Complex32::new(0.0, 0.0);
    const PREFIX: char = 'C';
    const DATA_TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_C_32F;
    const COMPUTE: sys::cublasComputeType_t = sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
}

impl GemmScalar for Complex64 {
    const ONE: Self = Complex64::new(1.0, 0.0);
    const ZERO: Self = Complex64::new(0.0, 0.0);
    const PREFIX: char = 'Z';
    const DATA_TYPE: sys::cudaDataType = sys::cudaDataType::CUDA_C_64F;
    const COMPUTE: sys::cublasComputeType_t = sys::cublasComputeType_t::CUBLAS_COMPUTE_64F;
}

/// A matrix product `C = alpha · op(A) · op(B) + beta · C` (column-major: see the
/// [module docs](self)), where `op(A)` is `m × k`, `op(B)` is `k × n` and `C` is `m × n`.
///
/// Made with [`Gemm::new`] (no transposes, `alpha` 1, `beta` 0, tight leading dimensions) and
/// adjusted with its setters; given to [`Dag::add_gemm`](crate::Dag::add_gemm), which checks it
/// against the buffers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm<T> {
    /// Rows of `op(A)` and `C`.
    pub m: usize,
    /// Columns of `op(B)` and `C`.
    pub n: usize,
    /// Columns of `op(A)`, rows of `op(B)`.
    pub k: usize,
    /// `op(A)`.
    pub trans_a: Transpose,
    /// `op(B)`.
    pub trans_b: Transpose,
    /// Scales the product.
    pub alpha: T,
    /// Scales `C`'s previous contents (0: `C` is only written).
    pub beta: T,
    /// `A`'s leading dimension (distance between its columns, in elements); `None`: the
    /// stored `A`'s row count.
    pub lda: Option<usize>,
    /// `B`'s leading dimension; `None`: the stored `B`'s row count.
    pub ldb: Option<usize>,
    /// `C`'s leading dimension; `None`: `m`.
    pub ldc: Option<usize>,
    /// The node's own cuBLAS workspace, in bytes (at least 1): allocated when the node is
    /// added, given to cuBLAS at capture so that it allocates nothing itself.
    pub workspace_bytes: usize,
}

impl<T: GemmScalar> Gemm<T> {
    /// `C = op(A) · op(B)` with `op(A)` `m × k` and `op(B)` `k × n`: no transposes, `alpha`
    /// 1, `beta` 0, tight leading dimensions, [`DEFAULT_WORKSPACE_BYTES`].
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        Gemm {
            m,
            n,
            k,
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            alpha: T::ONE,
            beta: T::ZERO,
            lda: None,
            ldb: None,
            ldc: None,
            workspace_bytes: DEFAULT_WORKSPACE_BYTES,
        }
    }
    /// Sets `op(A)` (the sizes stay those of `op(A)`).
    pub fn trans_a(mut self, t: Transpose) -> Self {
        self.trans_a = t;
        self
    }
    /// Sets `op(B)`.
    pub fn trans_b(mut self, t: Transpose) -> Self {
        self.trans_b = t;
        self
    }
    /// Sets `alpha`.
    pub fn alpha(mut self, alpha: T) -> Self {
        self.alpha = alpha;
        self
    }
    /// Sets `beta`.
    pub fn beta(mut self, beta: T) -> Self {
        self.beta = beta;
        self
    }
    /// Sets `A`'s leading dimension.
    pub fn lda(mut self, ld: usize) -> Self {
        self.lda = Some(ld);
        self
    }
    /// Sets `B`'s leading dimension.
    pub fn ldb(mut self, ld: usize) -> Self {
        self.ldb = Some(ld);
        self
    }
    /// Sets `C`'s leading dimension.
    pub fn ldc(mut self, ld: usize) -> Self {
        self.ldc = Some(ld);
        self
    }
    /// Sets the node's workspace size.
    pub fn workspace_bytes(mut self, bytes: usize) -> Self {
        self.workspace_bytes = bytes;
        self
    }
}

/// A raw cuBLAS handle (null for a recording backend's placeholder).
pub(crate) struct RawHandle(sys::cublasHandle_t);

// SAFETY: a cuBLAS handle may be used from any thread, one call at a time: it is only reached
// through `BlasInner::raw`'s mutex.
unsafe impl Send for RawHandle {}

struct BlasInner {
    raw: Mutex<RawHandle>,
    owner: Owner,
    /// A placeholder's next made-up workspace address.
    next_placeholder: AtomicU64,
}

impl Drop for BlasInner {
    fn drop(&mut self) {
        let Owner::Cuda(device) = &self.owner else {
            return;
        };
        let raw = self.raw.get_mut().unwrap_or_else(|p| p.into_inner()).0;
        // The handle is destroyed with its device current (cuBLAS's rule); every DAG and Exec
        // whose captured work used it held this `Blas` and is gone, and their workspaces wait
        // for the GPU work using them when they are freed.
        let destroyed = device.bind().and_then(|()| {
            // SAFETY: owned handle, used by nothing else any more (see above).
            unsafe { cb::destroy(raw) }
        });
        if let Err(e) = destroyed {
            device.defer("a cuBLAS handle", e);
        }
    }
}

/// A cuBLAS handle of one device, owned (destroyed on drop), for GEMM nodes
/// ([`Dag::add_gemm`](crate::Dag::add_gemm)). Clones share the handle.
///
/// The handle is used only while a DAG is lowered (instantiation, whole-graph update), one
/// capture at a time (it is behind a lock): each GEMM node sets its capture stream, its own
/// workspace and host pointer mode on it, then records its `cublasGemmEx`. What the capture
/// records (kernels with their arguments, the node's workspace address, `alpha` and `beta` by
/// value) does not depend on the handle afterwards; nodes keep the handle alive anyway.
#[derive(Clone)]
pub struct Blas {
    inner: Arc<BlasInner>,
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Blas({})", self.key())
    }
}

/// Where a recording [`Blas`]'s made-up workspace addresses start.
const PLACEHOLDER_BASE: u64 = 0xb1a5_0000_0000;

impl Blas {
    /// Loads cuBLAS (first use only: [`load::cublas`](crate::load::cublas)) and creates a
    /// handle on `device` (`cublasCreate_v2`), in host pointer mode. Fails with
    /// [`Error::LibraryNotFound`] (naming [`Library::Cublas`](crate::Library::Cublas) or
    /// [`Library::CublasLt`](crate::Library::CublasLt)) when the library is missing.
    pub fn new(device: &Device) -> Result<Blas> {
        crate::load::cublas()?;
        device.bind()?;
        // SAFETY: destroyed in `BlasInner::drop`, with the device current.
        let raw = unsafe { cb::create()? };
        let inner = BlasInner {
            raw: Mutex::new(RawHandle(raw)),
            owner: Owner::Cuda(device.clone()),
            next_placeholder: AtomicU64::new(0),
        };
        // SAFETY: `raw` is live (created above).
        unsafe { cb::set_pointer_mode(raw, sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST)? };
        Ok(Blas {
            inner: Arc::new(inner),
        })
    }

    /// A recording backend's placeholder: no handle, made-up workspace addresses.
    pub(crate) fn placeholder(owner: u64) -> Blas {
        Blas {
            inner: Arc::new(BlasInner {
                raw: Mutex::new(RawHandle(std::ptr::null_mut())),
                owner: Owner::Recording(owner),
                next_placeholder: AtomicU64::new(PLACEHOLDER_BASE),
            }),
        }
    }

    /// The device the handle belongs to (`None` for a recording backend's placeholder).
    pub fn device(&self) -> Option<&Device> {
        match &self.inner.owner {
            Owner::Cuda(d) => Some(d),
            Owner::Recording(_) => None,
        }
    }

    /// The device (or recording device) the handle belongs to.
    pub fn key(&self) -> DeviceKey {
        self.inner.owner.key()
    }

    /// cuBLAS's version (`cublasGetVersion_v2`: 130000 and up for cuBLAS 13.0).
    pub fn version(&self) -> Result<i32> {
        let raw = self.lock("asked its version")?;
        // SAFETY: live handle (locked).
        unsafe { cb::version(raw.0) }
    }

    /// The handle, locked; an error for a placeholder.
    pub(crate) fn lock(&self, doing: &'static str) -> Result<MutexGuard<'_, RawHandle>> {
        let guard = self.inner.raw.lock().unwrap_or_else(|p| p.into_inner());
        if guard.0.is_null() {
            return Err(Error::Placeholder {
                what: "this Blas".into(),
                problem: doing,
            });
        }
        Ok(guard)
    }

    /// A workspace of `bytes` for one node: device memory of the handle's device (a made-up
    /// placeholder range for a recording backend's).
    pub(crate) fn workspace(&self, bytes: usize) -> Result<DeviceBuffer<u8>> {
        match &self.inner.owner {
            Owner::Cuda(device) => DeviceBuffer::zeros(device, bytes),
            Owner::Recording(id) => {
                let step = (bytes as u64).div_ceil(256).max(1) * 256;
                let ptr = self
                    .inner
                    .next_placeholder
                    .fetch_add(step, Ordering::Relaxed);
                let a = Allocation::placeholder(ptr, bytes, MemorySpace::Device, *id);
                Ok(DeviceBuffer::from_alloc(Arc::new(a), bytes))
            }
        }
    }
}

impl RawHandle {
    /// The raw handle (live: placeholders are refused by [`Blas::lock`]).
    pub(crate) fn raw(&self) -> sys::cublasHandle_t {
        self.0
    }
}
