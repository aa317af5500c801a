//! The CPU engine: the reference implementation (rustfft, parallel over coarse channels with
//! rayon).
//!
//! Per product it keeps, for every selected (coarse channel, antenna, polarisation) stream, a
//! buffer of samples waiting for the FFT (so an FFT longer than a block gathers samples across
//! blocks), and an accumulator per (channel, output, IF) for the integration in progress (so an
//! integration spanning several blocks carries over).
//!
//! For a stream's spectrum `S = FFT(x)` (forward, unnormalised:
//! `S[j] = Σₙ x[n]·e^{−2πi·jn/N}`), fine channel `k` (0..N) of the output is `S[(k + ⌈N/2⌉) mod N]`
//! (fft shift: baseband frequency `(k − ⌊N/2⌋)/N` of the sample rate increases with `k`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use num_complex::Complex32;
use rayon::prelude::*;
use rustfft::{Fft, FftPlanner};

use crate::engine::{BlockView, Engine, Integration, SpectraPool};
use crate::error::Result;
use crate::plan::{AntennaMode, Detection, Plan, ProductPlan};

/// The CPU reference engine.
pub struct CpuEngine {
    plan: Plan,
    products: Vec<ProductState>,
    compute: Duration,
    pool: SpectraPool,
}

struct ProductState {
    p: ProductPlan,
    fft: Arc<dyn Fft<f32>>,
    /// Spectra the pending buffer holds per stream.
    batch: usize,
    /// `[chan][antenna][pol][batch × nfft]` samples waiting for the FFT.
    pending: Vec<Complex32>,
    /// Samples per stream in `pending`.
    fill: usize,
    /// `[chan][output][if][nfft]` running sums of the integration in progress.
    accum: Vec<f32>,
    /// Spectra in `accum`.
    nacc: usize,
    /// Index of the next integration to complete.
    next_index: u64,
}

impl CpuEngine {
    /// An engine for `plan` (allocates the pending and accumulation buffers of every product).
    pub fn new(plan: &Plan) -> Result<CpuEngine> {
        let g = &plan.geometry;
        let mut planner = FftPlanner::<f32>::new();
        let nant = plan.antennas.len();
        let nout = plan.outputs.len();
        let products = plan
            .products
            .iter()
            .map(|p| {
                let batch = g.new_samples().div_ceil(p.nfft).max(1);
                ProductState {
                    fft: planner.plan_fft_forward(p.nfft),
                    batch,
                    pending: vec![
                        Complex32::default();
                        plan.nchan * nant * g.npol * batch * p.nfft
                    ],
                    fill: 0,
                    accum: vec![0.0; plan.nchan * nout * p.nifs * p.nfft],
                    nacc: 0,
                    next_index: 0,
                    p: p.clone(),
                }
            })
            .collect();
        Ok(CpuEngine {
            plan: plan.clone(),
            products,
            compute: Duration::ZERO,
            pool: SpectraPool::new(),
        })
    }
}

impl Engine for CpuEngine {
    type Buffer = Vec<u8>;

    fn name(&self) -> &'static str {
        "cpu"
    }

    fn alloc_buffer(&mut self, len: usize) -> Result<Vec<u8>> {
        Ok(vec![0; len])
    }

    fn process_block(&mut self, block: &BlockView<'_>, out: &mut Vec<Integration>) -> Result<()> {
        crate::engine::check_block(&self.plan, block)?;
        let t = Instant::now();
        let valid = self.plan.geometry.new_samples();
        for ps in &mut self.products {
            let cap = ps.batch * ps.p.nfft;
            let mut t0 = 0;
            while t0 < valid {
                let m = (cap - ps.fill).min(valid - t0);
                ps.load(&self.plan, block.data, t0, m);
                ps.fill += m;
                t0 += m;
                if ps.fill == cap {
                    ps.flush(&self.plan, ps.batch, &self.pool, out);
                    ps.fill = 0;
                }
            }
        }
        self.compute += t.elapsed();
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Integration>) -> Result<()> {
        let t = Instant::now();
        for ps in &mut self.products {
            let nspec = ps.fill / ps.p.nfft;
            if nspec > 0 {
                ps.flush(&self.plan, nspec, &self.pool, out);
            }
            ps.fill = 0;
        }
        self.compute += t.elapsed();
        Ok(())
    }

    fn timings(&self) -> Vec<(&'static str, Duration)> {
        vec![("compute", self.compute)]
    }

    fn spectra_pool(&self) -> &SpectraPool {
        &self.pool
    }
}

impl ProductState {
    /// Decodes samples `t0 .. t0 + m` of every selected stream into `pending` after `fill`.
    fn load(&mut self, plan: &Plan, data: &[u8], t0: usize, m: usize) {
        let g = &plan.geometry;
        let cap = self.batch * self.p.nfft;
        let per_chan = plan.antennas.len() * g.npol * cap;
        let fill = self.fill;
        self.pending
            .par_chunks_mut(per_chan)
            .enumerate()
            .for_each(|(c, chunk)| {
                for (ai, &a) in plan.antennas.iter().enumerate() {
                    let gch = a * g.nchan_per_ant + plan.chan_start + c;
                    for pol in 0..g.npol {
                        let s = (ai * g.npol + pol) * cap + fill;
                        g.decode(data, gch, pol, t0, &mut chunk[s..s + m]);
                    }
                }
            });
    }

    /// FFTs the first `nspec` spectra of every stream, detects and accumulates them, and emits
    /// the integrations that complete.
    fn flush(&mut self, plan: &Plan, nspec: usize, pool: &SpectraPool, out: &mut Vec<Integration>) {
        let g = &plan.geometry;
        let (nfft, nint, nifs) = (self.p.nfft, self.p.nint, self.p.nifs);
        let nant = plan.antennas.len();
        let nout = plan.outputs.len();
        let npol = g.npol;
        let cap = self.batch * nfft;
        let per_chan_pend = nant * npol * cap;
        let per_chan_acc = nout * nifs * nfft;
        let ndone = (self.nacc + nspec) / nint;
        let per_chan_done = (ndone * per_chan_acc).max(1);
        let mut done = vec![0.0f32; plan.nchan * per_chan_done];
        let nacc0 = self.nacc;
        let det = self.p.detection;
        let sum = plan.mode == AntennaMode::Sum;
        let fft = &self.fft;
        let weights = &plan.weights;
        self.accum
            .par_chunks_mut(per_chan_acc)
            .zip(self.pending.par_chunks_mut(per_chan_pend))
            .zip(done.par_chunks_mut(per_chan_done))
            .for_each(|((acc, pend), dn)| {
                let mut scratch = vec![Complex32::default(); fft.get_inplace_scratch_len()];
                for s in 0..nant * npol {
                    fft.process_with_scratch(
                        &mut pend[s * cap..s * cap + nspec * nfft],
                        &mut scratch,
                    );
                }
                let mut local = nacc0;
                let mut k = 0;
                for j in 0..nspec {
                    for ai in 0..nant {
                        let o = if sum { 0 } else { ai };
                        let x = &pend[ai * npol * cap + j * nfft..][..nfft];
                        let y =
                            (npol == 2).then(|| &pend[(ai * npol + 1) * cap + j * nfft..][..nfft]);
                        detect(
                            det,
                            x,
                            y,
                            weights[ai],
                            &mut acc[o * nifs * nfft..(o + 1) * nifs * nfft],
                        );
                    }
                    local += 1;
                    if local == nint {
                        dn[k * per_chan_acc..(k + 1) * per_chan_acc].copy_from_slice(acc);
                        acc.fill(0.0);
                        k += 1;
                        local = 0;
                    }
                }
            });
        self.nacc = (self.nacc + nspec) % nint;
        let nchans = self.p.nchans;
        for i in 0..ndone {
            for o in 0..nout {
                let mut data = pool.take(nifs * nchans);
                data.resize(nifs * nchans, 0.0);
                for c in 0..plan.nchan {
                    for ifx in 0..nifs {
                        let src = c * per_chan_done + i * per_chan_acc + (o * nifs + ifx) * nfft;
                        data[ifx * nchans + c * nfft..][..nfft]
                            .copy_from_slice(&done[src..src + nfft]);
                    }
                }
                out.push(Integration {
                    product: self.p.index,
                    output: o,
                    index: self.next_index + i as u64,
                    data,
                });
            }
        }
        self.next_index += ndone as u64;
    }
}

/// Adds the detected, fft-shifted spectrum of `x` (and `y`) times `w` into `acc`
/// (`[if][nfft]`).
fn detect(det: Detection, x: &[Complex32], y: Option<&[Complex32]>, w: f32, acc: &mut [f32]) {
    let n = x.len();
    let h = n.div_ceil(2);
    // Output channel k takes FFT bin (k + h) mod n.
    let src = |k: usize| if k + h < n { k + h } else { k + h - n };
    match (det, y) {
        (Detection::TotalPower, None) => {
            for (k, a) in acc[..n].iter_mut().enumerate() {
                *a += w * x[src(k)].norm_sqr();
            }
        }
        (Detection::TotalPower, Some(y)) => {
            for (k, a) in acc[..n].iter_mut().enumerate() {
                let j = src(k);
                *a += w * (x[j].norm_sqr() + y[j].norm_sqr());
            }
        }
        (Detection::FullPol, Some(y)) => {
            for k in 0..n {
                let j = src(k);
                let (xx, yy, xy) = (x[j].norm_sqr(), y[j].norm_sqr(), x[j] * y[j].conj());
                acc[k] += w * xx;
                acc[n + k] += w * yy;
                acc[2 * n + k] += w * xy.re;
                acc[3 * n + k] += w * xy.im;
            }
        }
        (Detection::Stokes, Some(y)) => {
            for k in 0..n {
                let j = src(k);
                let (xx, yy, xy) = (x[j].norm_sqr(), y[j].norm_sqr(), x[j] * y[j].conj());
                acc[k] += w * (xx + yy);
                acc[n + k] += w * (xx - yy);
                acc[2 * n + k] += w * 2.0 * xy.re;
                acc[3 * n + k] += w * -2.0 * xy.im;
            }
        }
        (_, None) => {
            unreachable!("full-pol detection of single-pol input is rejected by Plan::new")
        }
    }
}
