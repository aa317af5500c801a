//! `cudagraph-spectrometer`: GUPPI RAW baseband scans in, SIGPROC filterbank spectra out.
//!
//! The pieces are independent of the compute engine, so that a GPU engine can reuse them:
//!
//! - [`guppi`]: header cards, the block geometry, sample decoding;
//! - [`scan`]: a stem's files indexed block by block (overlap, `PKTIDX` gaps, truncated files)
//!   and the reader thread filling a bounded ring of buffers;
//! - [`plan`]: the products (Nfft, Nint, detection), the selection, the output axes;
//! - [`engine`]: the [`engine::Engine`] trait and the output layout every engine produces;
//! - [`cpu`]: the CPU reference engine;
//! - [`gpu`]: the GPU engine (one cudagraph DAG, launched once per block);
//! - [`filterbank`]: the SIGPROC writer and reader;
//! - [`inspect`]: what the `header` command prints about a `.fil`, `.h5` or RAW file;
//! - `fbh5` (feature `fbh5`): the FBH5 (HDF5 filterbank) writer and reader;
//! - [`plot`]: the PNG plots;
//! - [`pipeline`]: a run (reader thread → engine → writer thread);
//! - [`output`]: outputs written as temporaries and renamed together at the end, removed on an
//!   error or a signal, and stale ones of interrupted runs cleaned up;
//! - [`rawspec`]: rawspec's command line, names and defaults mapped onto a run (the `rawspec`
//!   subcommand, a drop-in for observatory scripts);
//! - [`generate`]: synthetic scans for tests and demonstrations.
//!
//! See the crate's README for the formats and conventions.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cpu;
pub mod engine;
pub mod error;
#[cfg(feature = "fbh5")]
pub mod fbh5;
pub mod filterbank;
pub mod generate;
pub mod gpu;
pub mod guppi;
pub mod inspect;
pub mod output;
pub mod pipeline;
pub mod plan;
pub mod plot;
pub mod rawspec;
pub mod scan;

pub use error::{Error, Result};
