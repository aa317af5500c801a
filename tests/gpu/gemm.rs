//! GPU tests of GEMM nodes (issue 28: cuBLAS through the captured path): products of several
//! shapes (square, non-square, transposed with padded leading dimensions, `beta` ≠ 0), in
//! f32, f64 and complex f32, each inside a DAG with a kernel before it (scaling `A`) and one
//! after it (adding to `C`), launched twice and checked against a CPU product accumulated in
//! f64; then `alpha` changed by a whole-graph update.
//!
//! Tolerance: a dot product of length `k` accumulated in precision `u` (2⁻²⁴ for f32, 2⁻⁵³ for
//! f64) is off by at most `γ_k ≈ k·u` times `Σ|a||b|` (Higham, Accuracy and Stability of
//! Numerical Algorithms, §3.5), whatever order cuBLAS sums in; scaling by `alpha`, adding
//! `beta·C` and the kernel after add a few roundings more. Each element is compared with
//! `tol = (k + 4)·u·(|alpha|·Σ|a||b| + |beta|·|c| + |added|)`, the bound with a margin for
//! those. (For a complex product each term's rounding is `√2`-ish larger: the bound takes
//! `2(k + 4)·u`.) A wrong transpose, leading dimension or scalar is off by the values
//! themselves, orders of magnitude above it.

use anyhow::{ensure, Context};
use cudagraph::{args, Blas, Dag, DeviceBuffer, Gemm, GemmScalar, Kernel, LaunchConfig, Transpose};
use num_complex::Complex32;

use crate::common::Gpu;

const SOURCE: &str = r#"
extern "C" __global__ void scale_f32(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add_f32(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
extern "C" __global__ void scale_f64(double* x, double a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add_f64(double* x, double a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"#;

/// What the test needs of an element type: its kernels' names, conversion from f64 pairs, the
/// unit roundoff, and arithmetic in f64 for the reference.
trait Element: GemmScalar + Copy {
    /// The element's suffix in [`SOURCE`] (complex f32 uses the f32 kernels on twice the
    /// floats).
    const KERNELS: &'static str;
    /// Floats per element.
    const FLOATS: usize;
    /// Unit roundoff of the accumulation (complex counted twice).
    const U: f64;
    fn from_pair(re: f64, im: f64) -> Self;
    fn to_pair(self) -> (f64, f64);
}

impl Element for f32 {
    const KERNELS: &'static str = "f32";
    const FLOATS: usize = 1;
    const U: f64 = f32::EPSILON as f64 / 2.0;
    fn from_pair(re: f64, _: f64) -> Self {
        re as f32
    }
    fn to_pair(self) -> (f64, f64) {
        (self as f64, 0.0)
    }
}

impl Element for f64 {
    const KERNELS: &'static str = "f64";
    const FLOATS: usize = 1;
    const U: f64 = f64::EPSILON / 2.0;
    fn from_pair(re: f64, _: f64) -> Self {
        re
    }
    fn to_pair(self) -> (f64, f64) {
        (self, 0.0)
    }
}

impl Element for Complex32 {
    const KERNELS: &'static str = "f32";
    const FLOATS: usize = 2;
    const U: f64 = f32::EPSILON as f64;
    fn from_pair(re: f64, im: f64) -> Self {
        Complex32::new(re as f32, im as f32)
    }
    fn to_pair(self) -> (f64, f64) {
        (self.re as f64, self.im as f64)
    }
}

fn mul(a: (f64, f64), b: (f64, f64)) -> (f64, f64) {
    (a.0 * b.0 - a.1 * b.1, a.0 * b.1 + a.1 * b.0)
}

fn abs(a: (f64, f64)) -> f64 {
    a.0.hypot(a.1)
}

/// Deterministic values in [-1, 1) (a linear congruential sequence), distinct per `seed`.
fn values<T: Element>(len: usize, seed: u64) -> Vec<T> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut next = || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
    };
    (0..len).map(|_| T::from_pair(next(), next())).collect()
}

/// `op(X)[i][j]` of a column-major stored matrix.
fn op_at<T: Element>(x: &[T], ld: usize, t: Transpose, i: usize, j: usize) -> (f64, f64) {
    match t {
        Transpose::No => x[i + j * ld].to_pair(),
        Transpose::Yes => x[j + i * ld].to_pair(),
        Transpose::Conjugate => {
            let (re, im) = x[j + i * ld].to_pair();
            (re, -im)
        }
    }
}

/// One case: the product's description and the host data.
struct Case<T> {
    what: &'static str,
    g: Gemm<T>,
    a_len: usize,
    b_len: usize,
    c_len: usize,
}

fn case<T: Element>(what: &'static str, g: Gemm<T>) -> Case<T> {
    let stored = |t: Transpose, r: usize, c: usize| match t {
        Transpose::No => (r, c),
        _ => (c, r),
    };
    let (ar, ac) = stored(g.trans_a, g.m, g.k);
    let (br, bc) = stored(g.trans_b, g.k, g.n);
    Case {
        what,
        a_len: g.lda.unwrap_or(ar) * (ac - 1) + ar,
        b_len: g.ldb.unwrap_or(br) * (bc - 1) + br,
        c_len: g.ldc.unwrap_or(g.m) * (g.n - 1) + g.m,
        g,
    }
}

/// The CPU side of one launch: `A *= SCALE`, `C = alpha·op(A)·op(B) + beta·C`, `C += ADD`
/// (on the real part; the kernels see complex data as pairs of floats, so they also add to
/// the imaginary part: `ADD` goes to both). Returns the bound of each element's error.
fn cpu_launch<T: Element>(c: &Case<T>, a: &mut [T], b: &[T], out: &mut [T]) -> Vec<f64> {
    let g = &c.g;
    let (lda, ldb, ldc) = (
        g.lda
            .unwrap_or(if g.trans_a == Transpose::No { g.m } else { g.k }),
        g.ldb
            .unwrap_or(if g.trans_b == Transpose::No { g.k } else { g.n }),
        g.ldc.unwrap_or(g.m),
    );
    for x in a.iter_mut() {
        let (re, im) = x.to_pair();
        *x = T::from_pair(re * SCALE, im * SCALE);
    }
    let (alpha, beta) = (g.alpha.to_pair(), g.beta.to_pair());
    let mut bound = vec![0.0; out.len()];
    for j in 0..g.n {
        for i in 0..g.m {
            let (mut acc, mut mag) = ((0.0, 0.0), 0.0);
            for l in 0..g.k {
                let p = mul(
                    op_at(a, lda, g.trans_a, i, l),
                    op_at(b, ldb, g.trans_b, l, j),
                );
                acc = (acc.0 + p.0, acc.1 + p.1);
                mag += abs(p);
            }
            let old = out[i + j * ldc].to_pair();
            let (x, y) = (mul(alpha, acc), mul(beta, old));
            out[i + j * ldc] = T::from_pair(x.0 + y.0, x.1 + y.1);
            bound[i + j * ldc] =
                (g.k as f64 + 4.0) * T::U * (abs(alpha) * mag + abs(beta) * abs(old) + 2.0 * ADD);
        }
    }
    // The kernel after the product adds to every float of C's buffer, the padding between
    // columns (ldc > m) included.
    let imag = if T::FLOATS == 2 { ADD } else { 0.0 };
    for (x, tol) in out.iter_mut().zip(&mut bound) {
        let (re, im) = x.to_pair();
        *x = T::from_pair(re + ADD, im + imag);
        *tol += 4.0 * T::U * abs(x.to_pair());
    }
    bound
}

const SCALE: f64 = 2.0;
const ADD: f64 = 0.5;

/// Builds the DAG `scale(A) -> gemm -> add(C)` for `c`, launches it twice and compares each
/// launch's `C` with the CPU's; then changes `alpha` by a whole-graph update and checks again.
fn run_case<T: Element>(gpu: &Gpu, blas: &Blas, c: &Case<T>) -> anyhow::Result<()> {
    let d = &gpu.device;
    let m = gpu.module(SOURCE)?;
    let scale: Kernel = m.kernel(&format!("scale_{}", T::KERNELS))?;
    let add: Kernel = m.kernel(&format!("add_{}", T::KERNELS))?;
    let (mut a_host, b_host, mut c_host) = (
        values::<T>(c.a_len, 1),
        values::<T>(c.b_len, 2),
        values::<T>(c.c_len, 3),
    );
    let a = DeviceBuffer::from_slice(d, &a_host)?;
    let b = DeviceBuffer::from_slice(d, &b_host)?;
    let out = DeviceBuffer::from_slice(d, &c_host)?;
    let build = |g: &Gemm<T>| -> anyhow::Result<Dag> {
        let mut dag = Dag::new();
        let floats = |len: usize| (len * T::FLOATS) as i32;
        let cfg = |len: usize| LaunchConfig::for_elements(floats(len) as u32, 128);
        let s = if T::KERNELS == "f64" {
            dag.add_kernel(&scale, cfg(c.a_len), &args![&a, SCALE, floats(c.a_len)])?
        } else {
            dag.add_kernel(
                &scale,
                cfg(c.a_len),
                &args![&a, SCALE as f32, floats(c.a_len)],
            )?
        };
        let mm = dag.add_gemm(blas, g, &a, &b, &out)?;
        let p = if T::KERNELS == "f64" {
            dag.add_kernel(&add, cfg(c.c_len), &args![&out, ADD, floats(c.c_len)])?
        } else {
            dag.add_kernel(
                &add,
                cfg(c.c_len),
                &args![&out, ADD as f32, floats(c.c_len)],
            )?
        };
        dag.chain(&[s, mm, p])?;
        Ok(dag)
    };
    // Compares C with the CPU's and returns it: the CPU then goes on from the GPU's values, so
    // each launch is checked from the same inputs (rounding differences do not accumulate
    // through beta·C).
    let check = |label: &str, want: &[T], bound: &[f64]| -> anyhow::Result<Vec<T>> {
        let got = out.to_vec()?;
        let mut worst = 0.0f64;
        for (i, ((g, w), tol)) in got.iter().zip(want).zip(bound).enumerate() {
            let (g, w) = (g.to_pair(), w.to_pair());
            let err = abs((g.0 - w.0, g.1 - w.1));
            ensure!(
                err <= *tol,
                "{} {label}: C[{i}] = {g:?}, CPU {w:?}: error {err:e} above {tol:e}",
                c.what
            );
            worst = worst.max(err / tol);
        }
        println!(
            "  {} {label}: {} elements within the bound (worst at {:.3} of it)",
            c.what,
            got.len(),
            worst
        );
        Ok(got)
    };
    let dag = build(&c.g)?;
    let mut exec = dag.instantiate(d)?;
    for launch in 1..=2 {
        gpu.launch_and_wait(&mut exec)?;
        let bound = cpu_launch(c, &mut a_host, &b_host, &mut c_host);
        c_host = check(&format!("launch {launch}"), &c_host, &bound)?;
    }
    // alpha is recorded at capture: a new DAG and a whole-graph update (instantiated again if
    // CUDA refuses the changed capture).
    let g2 = c.g.alpha(T::from_pair(-0.75, 0.25));
    let outcome = exec.update_or_reinstantiate(&build(&g2)?)?;
    gpu.launch_and_wait(&mut exec)?;
    let c2 = Case { g: g2, ..*c };
    let bound = cpu_launch(&c2, &mut a_host, &b_host, &mut c_host);
    check(
        &format!("after alpha update ({outcome:?})"),
        &c_host,
        &bound,
    )?;
    Ok(())
}

impl<T: Copy> Clone for Case<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: Copy> Copy for Case<T> {}

register!(gpu "gemm::products_of_several_shapes_match_the_cpu" => products_match_the_cpu);
/// SGEMM square, non-square, transposed with padded leading dimensions and `beta` ≠ 0; DGEMM
/// non-square with `beta` ≠ 0; CGEMM with a conjugate transpose. Each between two kernels,
/// launched twice, then updated with another `alpha`.
fn products_match_the_cpu(gpu: &Gpu) -> anyhow::Result<()> {
    let blas = Blas::new(&gpu.device).context("cuBLAS (libcublas.so.13) is needed")?;
    println!("  cuBLAS version {}", blas.version()?);
    run_case(
        gpu,
        &blas,
        &case("sgemm 64x64x64", Gemm::<f32>::new(64, 64, 64)),
    )?;
    run_case(
        gpu,
        &blas,
        &case("sgemm 37x19x53", Gemm::<f32>::new(37, 19, 53).alpha(1.5)),
    )?;
    run_case(
        gpu,
        &blas,
        &case(
            "sgemm TT 33x17x129 padded, beta 0.5",
            Gemm::<f32>::new(33, 17, 129)
                .trans_a(Transpose::Yes)
                .trans_b(Transpose::Yes)
                .lda(131)
                .ldb(20)
                .ldc(40)
                .alpha(-1.25)
                .beta(0.5),
        ),
    )?;
    run_case(
        gpu,
        &blas,
        &case(
            "dgemm NT 50x31x70, beta -1",
            Gemm::<f64>::new(50, 31, 70)
                .trans_b(Transpose::Yes)
                .alpha(0.5)
                .beta(-1.0),
        ),
    )?;
    run_case(
        gpu,
        &blas,
        &case(
            "cgemm CN 24x40x16, beta 0.5+0.5i",
            Gemm::<Complex32>::new(24, 40, 16)
                .trans_a(Transpose::Conjugate)
                .alpha(Complex32::new(0.5, -1.0))
                .beta(Complex32::new(0.5, 0.5)),
        ),
    )
}

register!(gpu "gemm::two_gemms_without_an_edge_do_not_share_scratch" => independent_gemms);
/// Two large products with no path between them (CUDA may run them at once), each with its
/// own workspace, then the sum of both checked: a shared workspace would corrupt one.
fn independent_gemms(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let blas = Blas::new(d).context("cuBLAS (libcublas.so.13) is needed")?;
    let n = 512;
    let a = values::<f32>(n * n, 7);
    let b = values::<f32>(n * n, 8);
    let (da, db) = (
        DeviceBuffer::from_slice(d, &a)?,
        DeviceBuffer::from_slice(d, &b)?,
    );
    let (c1, c2) = (
        DeviceBuffer::<f32>::zeros(d, n * n)?,
        DeviceBuffer::<f32>::zeros(d, n * n)?,
    );
    let mut dag = Dag::new();
    dag.add_gemm(&blas, &Gemm::new(n, n, n), &da, &db, &c1)?;
    dag.add_gemm(
        &blas,
        &Gemm::new(n, n, n).trans_a(Transpose::Yes),
        &da,
        &db,
        &c2,
    )?;
    let mut exec = dag.instantiate(d)?;
    gpu.launch_and_wait(&mut exec)?;
    let (g1, g2) = (c1.to_vec()?, c2.to_vec()?);
    for (got, t) in [(g1, Transpose::No), (g2, Transpose::Yes)] {
        for j in (0..n).step_by(37) {
            for i in (0..n).step_by(41) {
                let (mut acc, mut mag) = (0.0, 0.0);
                for l in 0..n {
                    let p = op_at(&a, n, t, i, l).0 * b[l + j * n] as f64;
                    acc += p;
                    mag += p.abs();
                }
                let tol = (n as f64 + 4.0) * <f32 as Element>::U * mag;
                let err = (got[i + j * n] as f64 - acc).abs();
                ensure!(
                    err <= tol,
                    "{t:?} C[{i},{j}] = {}, CPU {acc}",
                    got[i + j * n]
                );
            }
        }
    }
    println!("  two concurrent {n}x{n}x{n} SGEMMs match the CPU (sampled)");
    Ok(())
}
