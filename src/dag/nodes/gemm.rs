//! GEMM nodes: a cuBLAS matrix product (`cublasGemmEx`) as a node, made through the captured
//! path ([`Dag::add_captured`]): cuBLAS has no graph-node API, so at every lowering the node
//! sets its capture stream and its own workspace on the [`Blas`] handle and records the call.
//!
//! The builder checks everything cuBLAS would refuse or misread (sizes, leading dimensions,
//! buffer lengths, the handle's device, `C` overlapping an input), naming the node; the
//! element type is the buffers' (one `T` for `A`, `B`, `C`, `alpha` and `beta`).

use crate::blas::{Blas, Gemm, GemmScalar, Transpose};
use crate::dag::{Dag, NodeId};
use crate::error::{DagError, Error, Result};
use crate::memory::{DeviceBuffer, Region};
use crate::result::cublas as cb;
use crate::sys;

/// The error of GEMM node `node`.
fn gemm_error(node: &str, problem: impl Into<String>) -> Error {
    DagError::Gemm {
        node: node.to_string(),
        problem: problem.into(),
    }
    .into()
}

/// `v` as cuBLAS's `int`, or an error naming `what`.
fn as_int(node: &str, what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| {
        gemm_error(
            node,
            format!("{what} = {v} is more than cuBLAS takes ({})", i32::MAX),
        )
    })
}

/// One operand's checks: the stored matrix is `rows × cols` with leading dimension `ld`
/// (`None`: `rows`); returns `ld` and the elements the matrix spans (`ld · (cols − 1) + rows`).
fn operand(
    node: &str,
    which: &str,
    rows: usize,
    cols: usize,
    ld: Option<usize>,
    len: usize,
) -> Result<(i32, usize)> {
    let ld = ld.unwrap_or(rows);
    if ld < rows.max(1) {
        return Err(gemm_error(
            node,
            format!(
                "{which}'s leading dimension {ld} is less than its stored row count {rows} \
                 (column-major: ld >= rows)"
            ),
        ));
    }
    let ld_int = as_int(node, &format!("{which}'s leading dimension"), ld)?;
    let span = ld
        .checked_mul(cols - 1)
        .and_then(|e| e.checked_add(rows))
        .ok_or_else(|| gemm_error(node, format!("{which}'s extent overflows")))?;
    if span > len {
        return Err(gemm_error(
            node,
            format!(
                "{which} is stored as {rows} x {cols} with leading dimension {ld}, which spans \
                 {span} elements, but its buffer has {len}"
            ),
        ));
    }
    Ok((ld_int, span))
}

/// What a GEMM node's captured work needs, by value (addresses of buffers the node keeps
/// alive through its `uses`).
struct GemmWork<T> {
    blas: Blas,
    transa: Transpose,
    transb: Transpose,
    m: i32,
    n: i32,
    k: i32,
    alpha: T,
    beta: T,
    a: u64,
    lda: i32,
    b: u64,
    ldb: i32,
    c: u64,
    ldc: i32,
    workspace: u64,
    workspace_bytes: usize,
}

impl<T: GemmScalar> GemmWork<T> {
    /// Records the product on `stream`, which is capturing into the graph.
    fn enqueue(&self, stream: sys::cudaStream_t) -> Result<()> {
        let handle = self.blas.lock("captured into a CUDA graph")?;
        let h = handle.raw();
        let g = cb::GemmEx {
            transa: self.transa.raw(),
            transb: self.transb.raw(),
            m: self.m,
            n: self.n,
            k: self.k,
            alpha: (&self.alpha as *const T).cast(),
            a: self.a as *const std::ffi::c_void,
            lda: self.lda,
            b: self.b as *const std::ffi::c_void,
            ldb: self.ldb,
            beta: (&self.beta as *const T).cast(),
            c: self.c as *mut std::ffi::c_void,
            ldc: self.ldc,
            data_type: T::DATA_TYPE,
            compute: T::COMPUTE,
        };
        // SAFETY: `h` is live and ours while the lock is held; `stream` is the live capture
        // stream of the lowering device, which is the handle's (the node was validated for
        // it: its buffers and workspace belong to the handle's device). The stream is set
        // first (setting it resets the workspace), then the node's own workspace (device
        // memory of that device, `workspace_bytes` long, 256-byte aligned as cudaMalloc's,
        // kept alive by the node; copies of the node share it, see `Dag::add_gemm`), then
        // host pointer mode: `alpha`
        // and `beta` are read during the call and recorded by value. `a`, `b`, `c` hold the
        // matrices their sizes and leading dimensions describe (checked when the node was
        // added), are kept alive by the node, and `c` overlaps neither input (checked too).
        let r = unsafe {
            cb::set_stream(h, stream).and_then(|()| {
                cb::set_workspace(
                    h,
                    self.workspace as *mut std::ffi::c_void,
                    self.workspace_bytes,
                )?;
                cb::set_pointer_mode(h, sys::cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST)?;
                cb::gemm_ex(h, &g)
            })
        };
        // The capture stream is destroyed after the capture: the handle must not keep naming
        // it (its destruction, or a later call that forgot to set a stream, would use it).
        // SAFETY: `h` is live and ours while the lock is held; the null stream is always valid.
        let reset = unsafe { cb::set_stream(h, std::ptr::null_mut()) };
        r.and(reset)
    }
}

impl Dag {
    /// Adds a matrix product `C = alpha · op(A) · op(B) + beta · C` by cuBLAS
    /// (`cublasGemmEx`), **column-major** (see [`crate::blas`] for row-major data), with the
    /// sizes, transposes, scalars and leading dimensions of `gemm`. The node's default name is
    /// `gemm#<serial>`.
    ///
    /// cuBLAS has no graph-node API: the node is a captured node
    /// ([`NodeKind::Captured`](crate::NodeKind::Captured), made with [`Dag::add_captured`]) whose
    /// work sets the capture stream, the node's own workspace (`gemm.workspace_bytes` of device
    /// memory allocated now, so that cuBLAS allocates nothing during capture and no two nodes
    /// share scratch) and host pointer mode on `blas`, then calls `cublasGemmEx`. Copies of
    /// the node share its workspace, as they share `C`: do not run two copies at once (a child
    /// DAG holding it added twice without an edge between the two, or two `Exec`s of one DAG
    /// launched concurrently), which would also write `C` twice at once; [`Dag::races`]
    /// reports the first case. It keeps
    /// `blas`, the buffers and the workspace alive. Dependencies are as for any node; for
    /// [`Dag::infer_dependencies`] it reads and writes `A`, `B`, `C` (the elements they span)
    /// and its workspace.
    ///
    /// Updates: `alpha`, `beta` and the buffers are recorded into the graph at capture, so an
    /// [`Exec`](crate::Exec) has no per-node setter for them; build the DAG with the new values
    /// and update the `Exec` as a whole ([`Exec::update`](crate::Exec::update), which captures
    /// the product again; cuBLAS may then pick other kernels, which CUDA refuses as a changed
    /// topology: [`Exec::update_or_reinstantiate`](crate::Exec::update_or_reinstantiate)
    /// instantiates again). [`Exec::set_enabled`](crate::Exec::set_enabled) switches the node
    /// off and on.
    ///
    /// Errors ([`DagError::Gemm`] naming the node): `m`, `n` or `k` zero or above `i32::MAX`; a
    /// leading dimension below the stored matrix's row count (`op(A)` is `m × k`: `A` is stored
    /// `m × k`, or `k × m` when transposed; likewise `B`, `k × n`; `C` is `m × n`); a buffer
    /// shorter than `ld · (cols − 1) + rows` elements; a buffer of another device than `blas`'s;
    /// `C` in the same buffer as `A` or `B`; a workspace of 0 bytes. Allocating the workspace may
    /// fail with CUDA's error.
    pub fn add_gemm<T: GemmScalar>(
        &mut self,
        blas: &Blas,
        gemm: &Gemm<T>,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &DeviceBuffer<T>,
    ) -> Result<NodeId> {
        let name = format!("gemm#{}", self.next_serial);
        let node = name.as_str();
        let m = as_int(node, "m", gemm.m)?;
        let n = as_int(node, "n", gemm.n)?;
        let k = as_int(node, "k", gemm.k)?;
        if m == 0 || n == 0 || k == 0 {
            return Err(gemm_error(
                node,
                format!(
                    "m = {}, n = {}, k = {}: every size must be at least 1",
                    gemm.m, gemm.n, gemm.k
                ),
            ));
        }
        let (ar, ac) = gemm.trans_a.stored(gemm.m, gemm.k);
        let (br, bc) = gemm.trans_b.stored(gemm.k, gemm.n);
        let (lda, a_span) = operand(node, "A", ar, ac, gemm.lda, a.len())?;
        let (ldb, b_span) = operand(node, "B", br, bc, gemm.ldb, b.len())?;
        let (ldc, c_span) = operand(node, "C", gemm.m, gemm.n, gemm.ldc, c.len())?;
        for (which, buf) in [("A", a), ("B", b), ("C", c)] {
            let owner = buf.alloc.owner.key();
            if owner != blas.key() {
                return Err(gemm_error(
                    node,
                    format!(
                        "{which} belongs to {owner}, but the cuBLAS handle to {}",
                        blas.key()
                    ),
                ));
            }
        }
        // By address, not allocation: one memory wrapped twice (another library's array
        // given as two buffers) is caught too.
        let c_region = c.region(..c_span);
        for (which, region) in [("A", a.region(..a_span)), ("B", b.region(..b_span))] {
            if region.overlaps(&c_region) {
                return Err(gemm_error(
                    node,
                    format!("C overlaps {which}: cuBLAS reads {which} while it writes C"),
                ));
            }
        }
        if gemm.workspace_bytes == 0 {
            return Err(gemm_error(node, "the workspace must be at least 1 byte"));
        }
        let workspace = blas.workspace(gemm.workspace_bytes)?;
        let regions: [Region; 4] = [
            a.region(..a_span),
            b.region(..b_span),
            c.region(..c_span),
            (&workspace).into(),
        ];
        let work = GemmWork {
            blas: blas.clone(),
            transa: gemm.trans_a,
            transb: gemm.trans_b,
            m,
            n,
            k,
            alpha: gemm.alpha,
            beta: gemm.beta,
            a: regions[0].raw_addr(),
            lda,
            b: regions[1].raw_addr(),
            ldb,
            c: regions[2].raw_addr(),
            ldc,
            workspace: regions[3].raw_addr(),
            workspace_bytes: gemm.workspace_bytes,
        };
        let what = format!(
            "{}gemm {}{} m={} n={} k={} lda={lda} ldb={ldb} ldc={ldc} alpha={:?} beta={:?} \
             workspace={}",
            T::PREFIX,
            gemm.trans_a.letter(),
            gemm.trans_b.letter(),
            gemm.m,
            gemm.n,
            gemm.k,
            gemm.alpha,
            gemm.beta,
            super::byte_count(gemm.workspace_bytes),
        );
        // SAFETY: add_captured's contract, each time the work runs:
        // - it enqueues only on the given stream (the handle's stream is set to it; cuBLAS
        //   enqueues its kernels there) and does not synchronise with the host (host pointer
        //   mode reads `alpha`/`beta` from our memory during the call; the node's workspace is
        //   set, so cuBLAS allocates nothing);
        // - the work touches only A, B and C within the spans checked above and the node's
        //   workspace: all four are the `uses`, kept alive by the node, never accessed from the
        //   host by this crate while a launch may run;
        // - the host state the captured work refers to is none after the call (values are
        //   recorded by value); the handle is kept alive by `work` anyway.
        let id = unsafe {
            self.add_captured(what, regions, move |s: &super::CaptureStream<'_>| {
                work.enqueue(s.raw())
            })
        };
        Ok(self.set_name(id, name))
    }
}
