//! The crate's error type: every bad input names the file, the block and the header key involved.

use std::path::PathBuf;

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong reading a scan, planning a run, processing or writing.
///
/// Header problems carry `file` (the RAW file), `block` (the block's index inside that file,
/// counting from 0) and `key` (the header keyword concerned).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A required header keyword is absent.
    #[error("{}: block {block}: missing header key {key}", file.display())]
    MissingKey {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The missing keyword.
        key: String,
    },
    /// A header keyword's value cannot be parsed or is out of range.
    #[error("{}: block {block}: header key {key} = {value:?}: expected {expected}", file.display())]
    BadValue {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The keyword.
        key: String,
        /// The value as written in the card.
        value: String,
        /// What was expected instead.
        expected: String,
    },
    /// A header card is neither `KEY = value`, a comment card nor `END`.
    #[error("{}: block {block}: header card {card} is malformed (key {key:?}): {text:?}", file.display())]
    MalformedCard {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// Card index inside the header, counting from 0.
        card: usize,
        /// The first eight characters of the card (its keyword field).
        key: String,
        /// The card's text (lossy UTF-8).
        text: String,
    },
    /// The file ends inside the header of a block before any usable block of the scan was read.
    #[error("{}: block {block}: header truncated after {cards} cards (last key {key:?}, no END card before the end of the file)", file.display())]
    TruncatedHeader {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The last keyword read before the end of the file ("" if none).
        key: String,
        /// Whole cards read.
        cards: usize,
    },
    /// No `END` card within the first `cards` cards: not a GUPPI RAW header.
    #[error("{}: block {block}: no END card in the first {cards} header cards (key END)", file.display())]
    NoEndCard {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// How many cards were searched.
        cards: usize,
    },
    /// `BLOCSIZE` is not a whole number of time samples for the channel/polarisation/bit geometry.
    #[error("{}: block {block}: header key BLOCSIZE = {blocsize} is not a whole number of time samples of OBSNCHAN ({obsnchan}) × {npol} complex pol × 2 × NBITS ({nbits}) bits", file.display())]
    BlocsizeMismatch {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// `BLOCSIZE`.
        blocsize: u64,
        /// `OBSNCHAN`.
        obsnchan: u64,
        /// Complex polarisations (1 or 2, from `NPOL`).
        npol: u64,
        /// `NBITS`.
        nbits: u64,
    },
    /// `NBITS` is not 4, 8 or 16.
    #[error("{}: block {block}: header key NBITS = {nbits} is not supported (4, 8 or 16)", file.display())]
    UnsupportedNbits {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The value found.
        nbits: i64,
    },
    /// A keyword that fixes the block geometry changed from the first block of the scan.
    #[error("{}: block {block}: header key {key} changed from {first} (first block of the scan) to {now}", file.display())]
    GeometryChanged {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The keyword.
        key: String,
        /// Its value in the first block.
        first: String,
        /// Its value here.
        now: String,
    },
    /// `PKTIDX` went backwards or jumped by something that is not a whole number of blocks.
    #[error("{}: block {block}: header key PKTIDX = {now} after {previous}: not a positive multiple of the step {step} {}", file.display(), if *piperblk { "given by PIPERBLK" } else { "inferred from the first two blocks" })]
    PktidxIrregular {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// `PKTIDX` of the previous block.
        previous: i64,
        /// `PKTIDX` here.
        now: i64,
        /// The per-block step (0 when the first two blocks already disagree).
        step: i64,
        /// Whether the step is the first block's `PIPERBLK` (else it was inferred).
        piperblk: bool,
    },
    /// `PKTIDX` jumped over more dropped blocks than the scan's limit
    /// ([`crate::scan::ScanOptions::max_gap_blocks`], `--max-gap-blocks`): far more likely a
    /// corrupt `PKTIDX` than a real loss, and each dropped block would be processed as zeros.
    #[error("{}: block {block}: header key PKTIDX = {now} after {previous} means {missing} dropped blocks (step {step}), more than the limit of {max} (--max-gap-blocks); a corrupt PKTIDX?", file.display())]
    PktidxGapTooLong {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// `PKTIDX` of the previous block.
        previous: i64,
        /// `PKTIDX` here.
        now: i64,
        /// The per-block step.
        step: i64,
        /// Blocks the jump implies were dropped.
        missing: u64,
        /// The limit.
        max: u64,
    },
    /// A header key the program reads has no value (a FITS blank card, `KEY     =` or
    /// `KEY     =   / comment`). Blank keys the program does not read are kept and ignored.
    #[error("{}: block {block}: header key {key} has no value (a blank card) but is needed", file.display())]
    BlankValue {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// The keyword.
        key: String,
    },
    /// A RAW file is empty, and no file of the scan holds a whole block.
    #[error("{}: the file is empty (0 bytes): no GUPPI RAW block to read", file.display())]
    EmptyFile {
        /// The RAW file.
        file: PathBuf,
    },
    /// A RAW file ends inside the data of a block, and no file of the scan holds a whole block.
    #[error("{}: block {block}: truncated: the file ends after {bytes} of the block's {blocsize} data bytes (BLOCSIZE); the scan has no whole block", file.display())]
    TruncatedData {
        /// The RAW file.
        file: PathBuf,
        /// Block index inside the file.
        block: usize,
        /// Data bytes present.
        bytes: u64,
        /// `BLOCSIZE`.
        blocsize: u64,
    },
    /// No `stem.NNNN.raw` file exists for a stem (a path that names a file is read as that file,
    /// see [`crate::scan::resolve_input`]).
    #[error("no RAW files for stem {}: expected {}.0000.raw, {}.0001.raw, …{}", stem.display(), stem.display(), stem.display(), scans_note(scans))]
    NoFiles {
        /// The stem as given.
        stem: PathBuf,
        /// The scans in the stem's directory (stem and number of files; see
        /// [`crate::scan::scans_in`]), named in the message as what could have been meant.
        scans: Vec<(String, usize)>,
    },
    /// The input is a directory: a run takes scans (files or stems), one by one.
    #[error("{} is a directory, not a scan: give one of its scans, as a RAW file or a stem{}", dir.display(), scans_note(scans))]
    InputIsDirectory {
        /// The directory.
        dir: PathBuf,
        /// Its scans (stem and number of files; see [`crate::scan::scans_in`]).
        scans: Vec<(String, usize)>,
    },
    /// The scan is too short for one integration of a product.
    #[error("product {product} ({nfft}×{nint}) needs {needed} samples per channel for one integration but the scan has {available} (after skipped blocks); choose a smaller Nfft×Nint")]
    NotEnoughSamples {
        /// Product index.
        product: usize,
        /// FFT length.
        nfft: usize,
        /// Spectra per integration.
        nint: usize,
        /// `nfft × nint`.
        needed: u64,
        /// Samples per channel available.
        available: u64,
    },
    /// More products were asked for than a run supports.
    #[error("{count} products requested; at most {max} are supported in one run")]
    TooManyProducts {
        /// Products asked for.
        count: usize,
        /// The limit ([`crate::plan::MAX_PRODUCTS`]).
        max: usize,
    },
    /// A product specification is invalid (syntax, zero sizes, or a mode the input cannot give).
    #[error("product {spec:?}: {reason}")]
    InvalidProduct {
        /// The specification (as given, or a description).
        spec: String,
        /// Why it is invalid.
        reason: String,
    },
    /// The channel or antenna selection does not fit the scan.
    #[error("selection: {0}")]
    Selection(String),
    /// The output directory cannot be created or written (the cause is the error's
    /// [`source`](std::error::Error::source), not repeated in its message).
    #[error("output directory {} cannot be written", path.display())]
    OutputDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// An I/O error on a named file (the cause is the error's
    /// [`source`](std::error::Error::source), not repeated in its message).
    #[error("{}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A filterbank file could not be parsed.
    #[error("{}: not a valid filterbank file: {reason}", path.display())]
    Filterbank {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An FBH5 (HDF5 filterbank) file could not be written or read.
    #[error("{}: FBH5: {reason}", path.display())]
    Fbh5 {
        /// The file.
        path: PathBuf,
        /// What went wrong (HDF5's message).
        reason: String,
    },
    /// Plotting failed.
    #[error("{}: cannot draw the plot: {reason}", path.display())]
    Plot {
        /// The PNG file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// Something this build or this program does not do (the message says what, and how to get
    /// it where there is a way).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// An engine reported an error.
    #[error("engine: {0}")]
    Engine(String),
    /// The generator was given an impossible configuration.
    #[error("generate: {0}")]
    Generate(String),
    /// A rawspec option (`cudagraph-spectrometer rawspec`) that cannot be honoured.
    #[error("rawspec option {option}: {reason}")]
    Rawspec {
        /// The option, as rawspec spells it (`-d`, `-f/-t`, …).
        option: String,
        /// Why.
        reason: String,
    },
}

/// The most scans an error lists.
const SCANS_LISTED: usize = 8;

/// "; the scans there: a (2 files), b (1 file)" for the scans of a directory, at most
/// [`SCANS_LISTED`] of them, or a note that it holds no RAW file.
fn scans_note(scans: &[(String, usize)]) -> String {
    if scans.is_empty() {
        return "; there is no .raw file there".to_string();
    }
    let mut listed: Vec<String> = (scans.iter().take(SCANS_LISTED))
        .map(|(stem, n)| format!("{stem} ({n} file{})", if *n == 1 { "" } else { "s" }))
        .collect();
    if scans.len() > SCANS_LISTED {
        listed.push(format!("and {} more", scans.len() - SCANS_LISTED));
    }
    format!("; the scans there: {}", listed.join(", "))
}

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
