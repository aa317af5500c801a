//! The seam between the pipeline (reader thread, writer thread) and the compute: an [`Engine`]
//! takes raw blocks and gives back integrated spectra.
//!
//! # Output layout contract
//!
//! Every engine produces [`Integration`]s, each one output integration of one output stream of
//! one product:
//!
//! - `product`: index into [`Plan::products`]; `output`: index into [`Plan::outputs`];
//!   `index`: integration number, 0, 1, 2, … within that (product, output).
//! - `data: Vec<f32>` of `nifs × nchans` values ([`ProductPlan::integration_len`]), **IF-major**:
//!   `data[if_index * nchans + ch]`, with `ch = c × nfft + k` for selected coarse channel `c`
//!   (0-based within the selection) and fft-shifted fine channel `k`, so channel `ch` has centre
//!   frequency `fch1 + ch × foff` ([`ProductPlan::frequency`]). This is exactly one time sample
//!   of the SIGPROC file (time, IF, channel order).
//! - Values are sums over `nint` spectra of detected powers of the forward, unnormalised FFT of
//!   the integer-valued input samples (see [`crate::plan::Detection`] for the IFs), and for the
//!   incoherent sum, the weighted sum over antennas.
//! - For each (product, output), integrations come in increasing `index`; the interleaving of
//!   different products and outputs is free. Partial integrations at the end are dropped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::Result;
use crate::guppi::Geometry;
use crate::plan::{Plan, ProductPlan};
use crate::scan::{BlockBuffer, FilledBlock, SlotKind};

/// One block handed to an engine.
#[derive(Debug, Clone, Copy)]
pub struct BlockView<'a> {
    /// Exactly `BLOCSIZE` bytes in the recorder's `[channel][time][pol][re, im]` layout (all
    /// channels and antennas of the block, unselected ones included). Only the first
    /// `ntime − OVERLAP` samples of each channel are new ([`Geometry::new_samples`]); engines
    /// must use those and ignore the rest.
    pub data: &'a [u8],
    /// Position on the processed time axis (0, 1, 2, …, gaps included).
    pub seq: u64,
    /// Where the block came from ([`SlotKind::Gap`]: all bytes are zero).
    pub kind: SlotKind,
    /// The block geometry.
    pub geometry: &'a Geometry,
}

/// One integrated spectrum of one output of one product (see the module docs for the layout).
#[derive(Debug, Clone, PartialEq)]
pub struct Integration {
    /// Product index.
    pub product: usize,
    /// Output index ([`Plan::outputs`]).
    pub output: usize,
    /// Integration number within (product, output).
    pub index: u64,
    /// `nifs × nchans` values, IF-major, channels in output (frequency-axis) order.
    pub data: Vec<f32>,
}

/// Spectrum buffers handed back by the writer for the engine to fill again: one integration of
/// full polarisation over 64K channels is 1 MiB, and a fresh vector of that size per integration
/// costs its pages' faults (measured: three to six times a plain copy), which limited the full
/// polarisation and IQUV rates. Clones share one pool. It keeps at most
/// [`SpectraPool::MAX_BYTES`] of buffers; what does not fit is freed.
#[derive(Debug, Clone, Default)]
pub struct SpectraPool(Arc<Mutex<PoolInner>>);

#[derive(Debug, Default)]
struct PoolInner {
    free: Vec<Vec<f32>>,
    bytes: usize,
}

impl SpectraPool {
    /// The most bytes of buffers the pool keeps.
    pub const MAX_BYTES: usize = 256 << 20;

    /// A new, empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty vector with room for `len` values: a returned buffer when one is large enough
    /// (the smallest such), else a new one.
    pub fn take(&self, len: usize) -> Vec<f32> {
        let mut inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let best = inner
            .free
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        match best {
            Some(i) => {
                let mut v = inner.free.swap_remove(i);
                inner.bytes -= v.capacity() * 4;
                v.clear();
                v
            }
            None => Vec::with_capacity(len),
        }
    }

    /// A copy of `values` in a pooled buffer.
    pub fn copy_of(&self, values: &[f32]) -> Vec<f32> {
        let mut v = self.take(values.len());
        v.extend_from_slice(values);
        v
    }

    /// Hands `buffer` back for reuse (freed if the pool is full).
    pub fn give(&self, buffer: Vec<f32>) {
        let size = buffer.capacity() * 4;
        if size == 0 {
            return;
        }
        let mut inner = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if inner.bytes + size <= Self::MAX_BYTES {
            inner.bytes += size;
            inner.free.push(buffer);
        }
    }

    /// Buffers held now.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).free.len()
    }

    /// Whether no buffer is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A compute engine. The pipeline calls [`Engine::alloc_buffer`] to build the reader's ring,
/// then [`Engine::process_filled`] once per block in time order, then [`Engine::finish`].
pub trait Engine {
    /// The ring's buffer type: `Vec<u8>` for the CPU engine, page-locked
    /// `cudagraph::HostBuffer<u8>` for the GPU engine (its copies to the GPU read the ring
    /// buffers themselves).
    type Buffer: BlockBuffer;

    /// A short name for reports (`"cpu"`).
    fn name(&self) -> &'static str;

    /// A buffer of `len` (= `BLOCSIZE`) bytes for the reader's ring.
    fn alloc_buffer(&mut self, len: usize) -> Result<Self::Buffer>;

    /// Processes the next block. `block.data` is handed back to the reader when this returns: an
    /// engine that copies it asynchronously must wait for that copy first. Completed
    /// integrations are appended to `out`.
    fn process_block(&mut self, block: &BlockView<'_>, out: &mut Vec<Integration>) -> Result<()>;

    /// Processes the next block, filled by the reader into one of this engine's own ring
    /// buffers (how the pipeline calls it). The buffer goes back to the reader when this
    /// returns; work the engine queued on it may still read it then, because the reader's next
    /// fill waits for that work ([`BlockBuffer::fill_with`]). The default reads the bytes and
    /// calls [`Engine::process_block`] inside [`BlockBuffer::read_with`]; an engine whose
    /// buffers are pinned `HostBuffer`s and which queues GPU work on them overrides it (inside
    /// `HostBuffer::read_with`, cudagraph refuses stream operations with
    /// `Error::InsideHelper`), as the GPU engine does.
    fn process_filled(
        &mut self,
        block: &FilledBlock<Self::Buffer>,
        geometry: &Geometry,
        out: &mut Vec<Integration>,
    ) -> Result<()> {
        block.buf.read_with(|data| {
            self.process_block(
                &BlockView {
                    data,
                    seq: block.seq,
                    kind: block.kind,
                    geometry,
                },
                out,
            )
        })?
    }

    /// Called after the last block: processes what is pending and appends the remaining
    /// completed integrations (partial ones are dropped).
    fn finish(&mut self, out: &mut Vec<Integration>) -> Result<()>;

    /// Where the engine's time went, by phase: `"compute"` on the CPU; the GPU engine reports
    /// `"stage (host copy to pinned)"`, `"submit (H2D, GPU, D2H queued)"` and
    /// `"wait + collect"`.
    fn timings(&self) -> Vec<(&'static str, Duration)>;

    /// The pool the engine takes its [`Integration::data`] buffers from; the pipeline's writer
    /// hands each buffer back to it once written.
    fn spectra_pool(&self) -> &SpectraPool;

    /// Device memory the engine allocated for its buffers, bytes (0 for the CPU engine).
    fn device_bytes(&self) -> usize {
        0
    }

    /// Device memory in use now on the engine's GPU, by every process (`cudaMemGetInfo`:
    /// total less free), bytes; `None` for the CPU engine or when CUDA does not say.
    fn device_memory_in_use(&self) -> Option<u64> {
        None
    }
}

/// An error unless `block` has exactly the plan's `BLOCSIZE` bytes.
pub fn check_block(plan: &Plan, block: &BlockView<'_>) -> Result<()> {
    check_block_size(plan, block.seq, block.data.len())
}

/// An error unless block `seq`'s `len` bytes are exactly the plan's `BLOCSIZE`.
pub fn check_block_size(plan: &Plan, seq: u64, len: usize) -> Result<()> {
    if len != plan.geometry.blocsize {
        return Err(crate::error::Error::Engine(format!(
            "block {seq} has {len} bytes, expected BLOCSIZE {}",
            plan.geometry.blocsize
        )));
    }
    Ok(())
}

/// Checks an integration against the plan's layout contract (for engine tests).
pub fn check_integration(plan: &Plan, it: &Integration) -> std::result::Result<(), String> {
    let p: &ProductPlan = plan
        .products
        .get(it.product)
        .ok_or_else(|| format!("product {} out of range", it.product))?;
    if it.output >= plan.outputs.len() {
        return Err(format!("output {} out of range", it.output));
    }
    if it.data.len() != p.integration_len() {
        return Err(format!(
            "integration has {} values, expected nifs {} × nchans {}",
            it.data.len(),
            p.nifs,
            p.nchans
        ));
    }
    if it.index >= p.integrations {
        return Err(format!(
            "integration index {} ≥ the {} planned",
            it.index, p.integrations
        ));
    }
    Ok(())
}

#[cfg(test)]
mod pool_tests {
    use super::SpectraPool;

    #[test]
    fn buffers_come_back_and_the_pool_is_bounded() {
        let pool = SpectraPool::new();
        let v = pool.copy_of(&[1.0, 2.0, 3.0]);
        let at = v.as_ptr();
        pool.give(v);
        assert_eq!(pool.len(), 1);
        // The same allocation, emptied, for anything that fits.
        let w = pool.take(2);
        assert_eq!((w.as_ptr(), w.len()), (at, 0));
        pool.give(w);
        // A larger request gets a new buffer and leaves the small one.
        let big = pool.take(1000);
        assert!(big.capacity() >= 1000);
        assert_eq!(pool.len(), 1);
        // The smallest buffer that fits is chosen.
        pool.give(big);
        assert!(pool.take(3).capacity() < 1000);
        // Beyond MAX_BYTES buffers are freed, not kept.
        let pool = SpectraPool::new();
        let n = SpectraPool::MAX_BYTES / 4 / 2 + 1;
        pool.give(Vec::with_capacity(n));
        pool.give(Vec::with_capacity(n));
        assert_eq!(pool.len(), 1);
    }
}
