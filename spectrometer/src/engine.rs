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

use std::time::Duration;

use crate::error::Result;
use crate::guppi::Geometry;
use crate::plan::{Plan, ProductPlan};
use crate::scan::{BlockBuffer, SlotKind};

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

/// A compute engine. The pipeline calls [`Engine::alloc_buffer`] to build the reader's ring,
/// then [`Engine::process_block`] once per block in time order, then [`Engine::finish`].
pub trait Engine {
    /// The ring's buffer type (`Vec<u8>` for both engines today: the GPU engine copies each
    /// block from it into page-locked staging buffers of its own).
    type Buffer: BlockBuffer;

    /// A short name for reports (`"cpu"`).
    fn name(&self) -> &'static str;

    /// A buffer of `len` (= `BLOCSIZE`) bytes for the reader's ring.
    fn alloc_buffer(&mut self, len: usize) -> Result<Self::Buffer>;

    /// Processes the next block. `block.data` is handed back to the reader when this returns: an
    /// engine that copies it asynchronously must wait for that copy first. Completed
    /// integrations are appended to `out`.
    fn process_block(&mut self, block: &BlockView<'_>, out: &mut Vec<Integration>) -> Result<()>;

    /// Called after the last block: processes what is pending and appends the remaining
    /// completed integrations (partial ones are dropped).
    fn finish(&mut self, out: &mut Vec<Integration>) -> Result<()>;

    /// Where the engine's time went, by phase: `"compute"` on the CPU; the GPU engine reports
    /// `"stage (host copy to pinned)"`, `"submit (H2D, GPU, D2H queued)"` and
    /// `"wait + collect"`.
    fn timings(&self) -> Vec<(&'static str, Duration)>;

    /// Device memory the engine allocated for its buffers, bytes (0 for the CPU engine).
    fn device_bytes(&self) -> usize {
        0
    }
}

/// An error unless `block` has exactly the plan's `BLOCSIZE` bytes.
pub fn check_block(plan: &Plan, block: &BlockView<'_>) -> Result<()> {
    if block.data.len() != plan.geometry.blocsize {
        return Err(crate::error::Error::Engine(format!(
            "block {} has {} bytes, expected BLOCSIZE {}",
            block.seq,
            block.data.len(),
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
