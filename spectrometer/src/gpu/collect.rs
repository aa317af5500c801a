//! Reading back what the blocks computed: the integrations each product's copy-backs put in its
//! pinned output buffers ([`CopyBacks`](super::slots::CopyBacks) says which buffer holds which
//! block's), read `depth` blocks after they were queued, or earlier where a copy would
//! otherwise overwrite a buffer not yet read.

use std::time::Instant;

use rayon::prelude::*;

use super::{gpu_err, GpuEngine};
use crate::engine::Integration;
use crate::error::Result;

impl GpuEngine {
    /// Before queuing block `launched`: makes room for its copy-backs
    /// ([`GpuEngine::make_room`]); returns its staging buffer, `launched mod depth`.
    pub(super) fn next_slot(&mut self, out: &mut Vec<Integration>) -> Result<usize> {
        self.make_room(out)?;
        Ok((self.launched % self.d_stage.len() as u64) as usize)
    }

    /// Before queuing block `k = launched`: reads, of each product that block `k`'s work
    /// copies integrations back for and whose output buffers all hold copies not yet read, the
    /// oldest (only products with fewer output buffers than staging buffers, [`out_depth`](super::slots::out_depth)).
    fn make_room(&mut self, out: &mut Vec<Integration>) -> Result<()> {
        let k = self.launched;
        let t = Instant::now();
        for i in 0..self.products.len() {
            let p = &self.products[i];
            if p.backs.full_for(k) {
                self.collect_oldest(i, out)?;
            }
        }
        self.collect_time += t.elapsed();
        Ok(())
    }

    /// After queuing block `k = launched − 1`: emits, of each product, what the launches
    /// `depth − 1` and more blocks back copied back (integrations of block `k − depth + 1` and
    /// older, or `k − depth` for a deferred copy), which waits for those launches only. So the
    /// engine queues up to `depth` blocks ahead of the GPU, as the staging buffers allow, and
    /// reading overlaps the GPU work of the blocks queued since.
    pub(super) fn collect_previous(&mut self, out: &mut Vec<Integration>) -> Result<()> {
        let t = Instant::now();
        let lag = self.d_stage.len() as u64;
        let launched = self.launched;
        for i in 0..self.products.len() {
            while self.products[i].backs.due(launched, lag) {
                self.collect_oldest(i, out)?;
            }
        }
        self.collect_time += t.elapsed();
        Ok(())
    }

    /// Emits every integration copied back and not yet read (the launches that copied them
    /// must have been queued).
    pub(super) fn collect_all(&mut self, out: &mut Vec<Integration>) -> Result<()> {
        for i in 0..self.products.len() {
            while self.products[i].backs.pending() {
                self.collect_oldest(i, out)?;
            }
        }
        Ok(())
    }

    /// Emits the integrations of product `i` that its oldest pending copy-back holds (those
    /// its block completed), from that copy's output buffer.
    fn collect_oldest(&mut self, i: usize, out: &mut Vec<Integration>) -> Result<()> {
        let nout = self.plan.outputs.len();
        let product = &mut self.products[i];
        let Some((k, j)) = product.backs.pop() else {
            return Ok(());
        };
        let done = product.backs.done_after(k);
        if done <= product.backs.emitted {
            return Ok(());
        }
        // Waits for the launch (or stream work) that wrote it, and no later one; reads the
        // completed integrations in place (no copy of the whole slot ring).
        let per_out = product.p.nifs * product.p.nchans;
        let (emitted, nslots, slot_len, product_index) = (
            product.backs.emitted,
            product.nslots as u64,
            product.slot_len,
            product.p.index,
        );
        let first = out.len();
        for index in emitted..done {
            for output in 0..nout {
                out.push(Integration {
                    product: product_index,
                    output,
                    index,
                    data: self.pool.take(per_out),
                });
            }
        }
        let fill = |host: &[f32], it: &mut Integration| {
            let slot = (it.index % nslots) as usize;
            let at = slot * slot_len + it.output * per_out;
            it.data.extend_from_slice(&host[at..at + per_out]);
        };
        let fresh = &mut out[first..];
        // Large integrations (full polarisation: 1 MiB each) are copied out of pinned
        // memory on every core; small ones on this thread.
        let parallel = fresh.len() > 1 && per_out >= 1 << 16;
        product.out[j]
            .read_with(|host| {
                if parallel {
                    fresh.par_iter_mut().for_each(|it| fill(host, it));
                } else {
                    fresh.iter_mut().for_each(|it| fill(host, it));
                }
            })
            .map_err(|x| gpu_err("reading integrations", x))?;
        product.backs.emitted = done;
        Ok(())
    }
}
