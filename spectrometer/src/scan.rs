//! A scan: the sequence of RAW files of one stem, indexed block by block, and the reader thread
//! that fills a bounded ring of block buffers from it.
//!
//! [`Scan::open`] reads every header (seeking over the data) before any processing, so a run
//! knows the number of blocks, the gaps and the truncations up front: bad headers fail before any
//! output is written, and the progress bar knows its length.
//!
//! Conventions (see the README for the reasoning):
//! - **Overlap.** The last `OVERLAP` samples of every block repeat the first samples of the next
//!   one, so each block contributes its first `ntime − OVERLAP` samples (the last block too).
//! - **Gaps.** The `PKTIDX` step per block is the first block's `PIPERBLK` where the recorder
//!   wrote it (hashpipe's "PKTIDX per block"), else the difference between the first two blocks'
//!   values. A jump of `k × step` (k > 1) means `k − 1` blocks were dropped: they become
//!   [`SlotKind::Gap`] slots, read as zero bytes (which decode to zero samples), and are reported
//!   in [`Scan::gaps`]. Any other jump is an [`Error::PktidxIrregular`]. Without `PIPERBLK`, a
//!   gap between the first two blocks cannot be told from the step. Without `PKTIDX` no gaps
//!   are detected.
//!   A jump of more than [`ScanOptions::max_gap_blocks`] blocks is an
//!   [`Error::PktidxGapTooLong`] (a corrupt `PKTIDX` would otherwise make a huge time axis).
//! - **Truncation.** A file that ends inside a block (its header or its data) is read up to its
//!   last whole block, with a warning in [`Scan::truncations`]; the next file of the sequence, if
//!   any, is still read (a gap shows up through `PKTIDX`). A header cut short before any whole
//!   block of the scan is an [`Error::TruncatedHeader`]; a scan with no whole block at all is an
//!   [`Error::TruncatedData`] or [`Error::EmptyFile`] naming the first file that fell short.
//! - **Inputs.** A path `NAME.NNNN.raw` stands for its whole sequence; any other path that names
//!   a file (or ends in `.raw`) is that one file; anything else is a stem (see
//!   [`resolve_input`]).

use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use cudagraph::HostBuffer;
use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::guppi::{read_header, Geometry, Header, HeaderRead, Loc, ObsInfo};

/// What a slot of the time axis holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotKind {
    /// A block read from `files[file]`, block `block` of that file, data starting at `offset`.
    Data {
        /// Index into [`Scan::files`].
        file: usize,
        /// Block index inside that file.
        block: usize,
        /// Byte offset of the block's data in the file.
        offset: u64,
    },
    /// A dropped block (from a `PKTIDX` gap): all samples zero.
    Gap,
}

/// A dropped-block gap found through `PKTIDX`.
#[derive(Debug, Clone, PartialEq)]
pub struct GapReport {
    /// The file of the block after the gap.
    pub file: PathBuf,
    /// That block's index in its file.
    pub block: usize,
    /// `PKTIDX` of the block before the gap.
    pub pktidx_before: i64,
    /// `PKTIDX` of the block after the gap.
    pub pktidx_after: i64,
    /// Blocks missing.
    pub missing_blocks: u64,
    /// Samples per channel filled with zeros.
    pub zero_samples: u64,
}

/// A file that ends inside a block.
#[derive(Debug, Clone, PartialEq)]
pub struct Truncation {
    /// The file.
    pub file: PathBuf,
    /// The index of the incomplete block in that file (= whole blocks kept).
    pub block: usize,
    /// Whether the file ends inside the header (else inside the data).
    pub in_header: bool,
    /// Bytes after the last whole block, ignored.
    pub bytes_ignored: u64,
    /// Data bytes of the incomplete block present in the file (0 when it ends in the header).
    pub data_bytes: u64,
}

/// How [`Scan::open_with`] indexes a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanOptions {
    /// The most blocks one `PKTIDX` jump may imply were dropped ([`Error::PktidxGapTooLong`]
    /// beyond). Each dropped block becomes a zero block on the time axis, so a corrupt `PKTIDX`
    /// must not be taken for a loss of millions of blocks.
    pub max_gap_blocks: u64,
}

/// The default [`ScanOptions::max_gap_blocks`].
pub const DEFAULT_MAX_GAP_BLOCKS: u64 = 1024;

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            max_gap_blocks: DEFAULT_MAX_GAP_BLOCKS,
        }
    }
}

/// An indexed scan.
#[derive(Debug, Clone)]
pub struct Scan {
    /// The stem that names the outputs: the path without `.NNNN.raw` (or `.raw` for a single file).
    pub stem: PathBuf,
    /// The RAW files in sequence order.
    pub files: Vec<PathBuf>,
    /// The first block's header (all keys, unknown ones included).
    pub header: Header,
    /// The block geometry (the same for every block; `directio` is the first block's).
    pub geometry: Geometry,
    /// The metadata of the first block.
    pub info: ObsInfo,
    /// The time axis, one slot per block: read blocks and gap blocks (once; a scan
    /// [`Scan::repeated`] goes through them [`Scan::repeats`] times).
    pub slots: Vec<SlotKind>,
    /// How many times the time axis goes through `slots` (1 but for [`Scan::repeated`]).
    repeats: usize,
    /// Gaps found.
    pub gaps: Vec<GapReport>,
    /// Files that end inside a block.
    pub truncations: Vec<Truncation>,
    /// Other warnings (absent optional keys and the like).
    pub warnings: Vec<String>,
    /// The inferred `PKTIDX` step per block, if known.
    pub pktidx_step: Option<i64>,
}

impl Scan {
    /// The scan read `times` times over, as one continuous recording (a soak test: a long run
    /// from a short scan; [`crate::pipeline::RunConfig::repeat`]). The time axis goes on across
    /// the repeats; `times` of 0 is taken as 1. Nothing is copied: a soak of a million repeats
    /// of a 32-block scan costs no more memory than one pass (a list of every slot would be
    /// 1 GiB).
    pub fn repeated(mut self, times: usize) -> Scan {
        self.repeats = times.max(1);
        self
    }

    /// How many times the time axis goes through [`Scan::slots`].
    pub fn repeats(&self) -> usize {
        self.repeats
    }

    /// Slots on the time axis, repeats included.
    pub fn slot_count(&self) -> usize {
        self.slots.len().saturating_mul(self.repeats)
    }

    /// Slot `i` of the time axis (repeats included), `None` past the end.
    pub fn slot(&self, i: usize) -> Option<SlotKind> {
        (i < self.slot_count()).then(|| self.slots[i % self.slots.len()])
    }
}

/// Whether `num` numbers a file of a sequence: four digits or more.
fn is_sequence_number(num: &str) -> bool {
    num.len() >= 4 && num.bytes().all(|b| b.is_ascii_digit())
}

/// `dir/name.0003.raw` → `("dir/name", "0003")`; any other path → `None`.
fn sequence_parts(input: &Path) -> Option<(&str, &str)> {
    let (stem, num) = input.to_str()?.strip_suffix(".raw")?.rsplit_once('.')?;
    is_sequence_number(num).then_some((stem, num))
}

/// `dir/name.0003.raw` (four digits or more) → `Some(dir/name)`; any other path → `None`.
fn sequence_stem(input: &Path) -> Option<PathBuf> {
    let (stem, _) = sequence_parts(input)?;
    (!stem.is_empty() && !stem.ends_with('/')).then(|| PathBuf::from(stem))
}

/// The stem that names an input's outputs: `dir/name.0003.raw` → `dir/name`, `dir/name.raw` →
/// `dir/name`, anything else itself.
pub fn stem_of(input: &Path) -> PathBuf {
    if let Some(stem) = sequence_stem(input) {
        return stem;
    }
    match input.to_str().and_then(|s| s.strip_suffix(".raw")) {
        Some(base) if !base.is_empty() && !base.ends_with('/') => PathBuf::from(base),
        _ => input.to_path_buf(),
    }
}

/// The stem and the files of an input, in sequence order:
/// - `NAME.NNNN.raw` (four digits or more): every file `NAME.NNNN.raw` that exists;
/// - any other path naming a file, or ending in `.raw`: that file alone (an [`Error::Io`] if it
///   cannot be read), its stem the path without `.raw`;
/// - anything else: a stem, whose files are `STEM.NNNN.raw` ([`Error::NoFiles`] if none).
pub fn resolve_input(input: &Path) -> Result<(PathBuf, Vec<PathBuf>)> {
    if input.is_dir() {
        return Err(Error::InputIsDirectory {
            dir: input.to_path_buf(),
            scans: scans_in(input),
        });
    }
    if let Some(stem) = sequence_stem(input) {
        let files = find_files(&stem)?;
        return Ok((stem, files));
    }
    let ends_raw = input.to_str().is_some_and(|s| s.ends_with(".raw"));
    if input.is_file() || ends_raw {
        std::fs::metadata(input).map_err(|e| Error::io(input, e))?;
        return Ok((stem_of(input), vec![input.to_path_buf()]));
    }
    Ok((input.to_path_buf(), find_files(input)?))
}

/// The scans in directory `dir`: the stems of its `.raw` files (as [`stem_of`] names them: a
/// sequence `NAME.NNNN.raw` is one scan, any other `NAME.raw` another) with their numbers of
/// files, sorted by stem. Best effort, for error messages: empty when `dir` cannot be read.
pub fn scans_in(dir: &Path) -> Vec<(String, usize)> {
    let mut scans = std::collections::BTreeMap::<String, usize>::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = PathBuf::from(entry.file_name());
        if name.extension().is_some_and(|e| e == "raw") && !entry.path().is_dir() {
            *scans
                .entry(stem_of(&name).to_string_lossy().into_owned())
                .or_default() += 1;
        }
    }
    scans.into_iter().collect()
}

/// The number and its digits of a file `NAME.NNNN.raw` of a sequence.
fn sequence_number(file: &Path) -> Option<(u64, usize)> {
    let (_, num) = sequence_parts(file)?;
    Some((num.parse().ok()?, num.len()))
}

/// A warning for each hole in the numbering of a sequence's `files` (in numeric order): a
/// missing file's blocks are read as dropped ones only where the `PKTIDX` of the next file
/// says so, so the hole is named even when it is not a gap.
fn missing_files(stem: &Path, files: &[PathBuf]) -> Vec<String> {
    let numbered: Vec<(u64, usize)> = files.iter().filter_map(|f| sequence_number(f)).collect();
    if numbered.len() != files.len() {
        return Vec::new();
    }
    numbered
        .windows(2)
        .zip(files.windows(2))
        .filter(|(n, _)| n[1].0 > n[0].0 + 1)
        .map(|(n, f)| {
            let (first, last, w) = (n[0].0 + 1, n[1].0 - 1, n[0].1);
            let which = if first == last {
                format!("file {}.{first:0w$}.raw is", stem.display())
            } else {
                format!(
                    "files {}.{first:0w$}.raw to .{last:0w$}.raw are",
                    stem.display()
                )
            };
            format!(
                "{which} missing from the sequence (between {} and {})",
                f[0].display(),
                f[1].display()
            )
        })
        .collect()
}

/// The files `stem.NNNN.raw` that exist, in numeric order.
pub fn find_files(stem: &Path) -> Result<Vec<PathBuf>> {
    let dir = match stem.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let no_files = || Error::NoFiles {
        stem: stem.to_path_buf(),
        scans: scans_in(&dir),
    };
    let name = stem
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(no_files)?;
    let entries = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(&dir, e))?;
        let fname = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = fname
            .strip_prefix(name.as_str())
            .and_then(|r| r.strip_prefix('.'))
            .and_then(|r| r.strip_suffix(".raw"))
        else {
            continue;
        };
        if is_sequence_number(rest) {
            if let Ok(n) = rest.parse::<u64>() {
                found.push((n, entry.path()));
            }
        }
    }
    found.sort();
    if found.is_empty() {
        return Err(no_files());
    }
    Ok(found.into_iter().map(|(_, p)| p).collect())
}

/// The keys whose value must not change within a scan.
fn fixed_keys(g: &Geometry, i: &ObsInfo) -> [(&'static str, String); 9] {
    [
        ("BLOCSIZE", g.blocsize.to_string()),
        ("OBSNCHAN", g.obsnchan.to_string()),
        ("NPOL", g.npol.to_string()),
        ("NBITS", g.nbits.to_string()),
        ("NANTS", g.nants.to_string()),
        ("OVERLAP", g.overlap.to_string()),
        ("OBSFREQ", i.obsfreq.to_string()),
        ("OBSBW", i.obsbw.to_string()),
        ("TBIN", i.tbin.to_string()),
    ]
}

impl Scan {
    /// Finds the files of `input` (a stem, a file `stem.NNNN.raw` of a sequence, or any one RAW
    /// file: see [`resolve_input`]) and indexes every block, with the default [`ScanOptions`].
    pub fn open(input: &Path) -> Result<Scan> {
        Scan::open_with(input, &ScanOptions::default())
    }

    /// [`Scan::open`] with `options`.
    pub fn open_with(input: &Path, options: &ScanOptions) -> Result<Scan> {
        let (stem, files) = resolve_input(input)?;
        // Why the scan has no whole block yet, if it has none at the end.
        let mut short: Option<Error> = None;
        let mut first: Option<(Header, Geometry, ObsInfo)> = None;
        let mut slots = Vec::new();
        let mut gaps = Vec::new();
        let mut truncations = Vec::new();
        let mut warnings = missing_files(&stem, &files);
        let mut prev_pktidx: Option<i64> = None;
        let mut step: Option<i64> = None;
        // Whether `step` is the first block's PIPERBLK.
        let mut piperblk = false;
        let mut pktidx_ok = true;
        let mut data_blocks = 0usize;

        for (fi, path) in files.iter().enumerate() {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
            let mut r = BufReader::with_capacity(64 * 1024, file);
            let mut pos = 0u64;
            let mut block = 0usize;
            if len == 0 {
                warnings.push(format!("{}: empty file (0 bytes)", path.display()));
                short.get_or_insert_with(|| Error::EmptyFile { file: path.clone() });
            }
            loop {
                if pos >= len {
                    break;
                }
                r.seek(SeekFrom::Start(pos))
                    .map_err(|e| Error::io(path, e))?;
                let loc = Loc::new(path, block);
                let (header, hlen) = match read_header(&mut r, &loc)? {
                    HeaderRead::Eof => break,
                    HeaderRead::Truncated { cards, last_key } => {
                        if data_blocks == 0 {
                            return Err(Error::TruncatedHeader {
                                file: path.clone(),
                                block,
                                key: last_key,
                                cards,
                            });
                        }
                        truncations.push(Truncation {
                            file: path.clone(),
                            block,
                            in_header: true,
                            bytes_ignored: len - pos,
                            data_bytes: 0,
                        });
                        break;
                    }
                    HeaderRead::Complete { header, len } => (header, len),
                };
                let g = Geometry::from_header(&header, &loc)?;
                let (info, w) = ObsInfo::from_header(&header, &g, &loc)?;
                match &first {
                    None => {
                        warnings.extend(w);
                        first = Some((header.clone(), g, info.clone()));
                    }
                    Some((_, g0, i0)) => {
                        for ((key, a), (_, b)) in
                            fixed_keys(g0, i0).into_iter().zip(fixed_keys(&g, &info))
                        {
                            if a != b {
                                return Err(Error::GeometryChanged {
                                    file: path.clone(),
                                    block,
                                    key: key.to_string(),
                                    first: a,
                                    now: b,
                                });
                            }
                        }
                    }
                }
                let data_off = pos + hlen;
                if data_off + g.blocsize as u64 > len {
                    let data_bytes = len.saturating_sub(data_off);
                    if data_blocks == 0 {
                        short.get_or_insert_with(|| Error::TruncatedData {
                            file: path.clone(),
                            block,
                            bytes: data_bytes,
                            blocsize: g.blocsize as u64,
                        });
                    }
                    truncations.push(Truncation {
                        file: path.clone(),
                        block,
                        in_header: false,
                        bytes_ignored: len - pos,
                        data_bytes,
                    });
                    break;
                }
                // PIPERBLK, where the recorder wrote it (hashpipe's PKTIDX step per block), is
                // the step from the first block on, so that a gap right after it is seen too.
                if data_blocks == 0 {
                    let ignored = "ignored: the PKTIDX step is inferred from the first two blocks";
                    match header.opt_int("PIPERBLK", &loc) {
                        Ok(Some(s)) if s > 0 => (step, piperblk) = (Some(s), true),
                        Ok(None) => {}
                        Ok(Some(s)) => warnings.push(format!(
                            "{}: block {block}: PIPERBLK = {s} is not a positive step, {ignored}",
                            path.display()
                        )),
                        Err(e) => warnings.push(format!("{e}; {ignored}")),
                    }
                }
                // PKTIDX: the step from PIPERBLK or the first two blocks, then look for gaps.
                match header.opt_int("PKTIDX", &loc)? {
                    None => {
                        if pktidx_ok {
                            warnings.push(format!(
                                "{}: block {block}: no PKTIDX: dropped blocks cannot be detected",
                                path.display()
                            ));
                        }
                        pktidx_ok = false;
                    }
                    Some(p) if pktidx_ok => {
                        if let Some(prev) = prev_pktidx {
                            let irregular = |step| Error::PktidxIrregular {
                                file: path.clone(),
                                block,
                                previous: prev,
                                now: p,
                                step,
                                piperblk,
                            };
                            let d = p
                                .checked_sub(prev)
                                .ok_or_else(|| irregular(step.unwrap_or(0)))?;
                            match step {
                                None => {
                                    if d <= 0 {
                                        return Err(irregular(0));
                                    }
                                    step = Some(d);
                                }
                                Some(s) if d == s => {}
                                Some(s) if d > s && d % s == 0 => {
                                    let missing = (d / s - 1) as u64;
                                    if missing > options.max_gap_blocks {
                                        return Err(Error::PktidxGapTooLong {
                                            file: path.clone(),
                                            block,
                                            previous: prev,
                                            now: p,
                                            step: s,
                                            missing,
                                            max: options.max_gap_blocks,
                                        });
                                    }
                                    gaps.push(GapReport {
                                        file: path.clone(),
                                        block,
                                        pktidx_before: prev,
                                        pktidx_after: p,
                                        missing_blocks: missing,
                                        zero_samples: missing
                                            .saturating_mul(g.new_samples() as u64),
                                    });
                                    slots.extend((0..missing).map(|_| SlotKind::Gap));
                                }
                                Some(s) => return Err(irregular(s)),
                            }
                        }
                        prev_pktidx = Some(p);
                    }
                    Some(_) => {}
                }
                slots.push(SlotKind::Data {
                    file: fi,
                    block,
                    offset: data_off,
                });
                data_blocks += 1;
                pos = data_off + g.data_len_on_disk();
                block += 1;
            }
        }
        if data_blocks == 0 {
            return Err(short.unwrap_or(Error::NoFiles {
                stem,
                scans: Vec::new(),
            }));
        }
        let (header, geometry, info) = first.expect("a whole block was read");
        Ok(Scan {
            stem,
            files,
            header,
            geometry,
            info,
            slots,
            repeats: 1,
            gaps,
            truncations,
            warnings,
            pktidx_step: if pktidx_ok { step } else { None },
        })
    }

    /// The stem's file name (used to name outputs).
    pub fn name(&self) -> String {
        self.stem
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scan".to_string())
    }

    /// Samples per channel on the time axis from slot `first` on (gaps included).
    pub fn samples_from(&self, first: usize) -> u64 {
        (self.slot_count().saturating_sub(first) as u64)
            .saturating_mul(self.geometry.new_samples() as u64)
    }

    /// Human-readable lines for the gaps and truncations found.
    pub fn report_lines(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .warnings
            .iter()
            .map(|w| format!("warning: {w}"))
            .collect();
        for g in &self.gaps {
            out.push(format!(
                "gap: {} block {}: PKTIDX {} → {}: {} block(s) dropped, {} samples per channel filled with zeros",
                g.file.display(),
                g.block,
                g.pktidx_before,
                g.pktidx_after,
                g.missing_blocks,
                g.zero_samples
            ));
        }
        for t in &self.truncations {
            let inside = if t.in_header {
                "header".to_string()
            } else {
                format!(
                    "data: truncated, {} of BLOCSIZE {} bytes",
                    t.data_bytes, self.geometry.blocsize
                )
            };
            out.push(format!(
                "warning: {} ends inside block {} ({inside}): stopped at the last whole block, {} byte(s) ignored",
                t.file.display(),
                t.block,
                t.bytes_ignored
            ));
        }
        out
    }
}

/// A block buffer the reader can fill: `Vec<u8>` for the CPU engine, page-locked
/// [`HostBuffer<u8>`] for the GPU engine, which copies each block to the GPU straight from the
/// ring ([`Engine::Buffer`]). Access goes through closures so that a pinned buffer can first
/// wait for the queued copy that still reads it.
///
/// [`Engine::Buffer`]: crate::engine::Engine::Buffer
pub trait BlockBuffer: Send + 'static {
    /// Its size in bytes.
    fn size(&self) -> usize;
    /// Runs `f` on the bytes, writable, once no queued work reads them any more.
    fn fill_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R>;
    /// Runs `f` on the bytes, once no queued work uses them any more.
    fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R>;
}

impl BlockBuffer for Vec<u8> {
    fn size(&self) -> usize {
        self.len()
    }
    fn fill_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        Ok(f(self))
    }
    fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        Ok(f(self))
    }
}

/// The GPU engine's ring: the host→device copy of a block reads the buffer after the engine
/// has handed it back, and the reader's next fill waits for that copy (cudagraph notes the
/// copy on the buffer, and [`HostBuffer::write_with`] waits for what is noted).
impl BlockBuffer for HostBuffer<u8> {
    fn size(&self) -> usize {
        self.len()
    }
    fn fill_with<R>(&mut self, f: impl FnOnce(&mut [u8]) -> R) -> Result<R> {
        self.write_with(f)
            .map_err(|e| Error::Engine(format!("filling a pinned block buffer: {e}")))
    }
    fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        HostBuffer::read_with(self, f)
            .map_err(|e| Error::Engine(format!("reading a pinned block buffer: {e}")))
    }
}

/// A filled buffer handed from the reader thread to the engine.
#[derive(Debug)]
pub struct FilledBlock<B> {
    /// Position on the processed time axis (0 = first processed slot).
    pub seq: u64,
    /// The slot it came from: its index on the time axis, skipped slots counted
    /// ([`Scan::slot`]; into [`Scan::slots`] modulo their number for a repeated scan).
    pub slot: usize,
    /// What the slot is.
    pub kind: SlotKind,
    /// Exactly `BLOCSIZE` bytes of samples.
    pub buf: B,
}

/// What the reader thread measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReaderStats {
    /// Time spent in reads (and zero-filling gaps).
    pub read_time: Duration,
    /// Bytes read from files.
    pub bytes_read: u64,
}

/// The reader thread and its ring. Host memory is bounded by the buffers given to
/// [`BlockReader::spawn`], whatever the scan's length: the thread takes a free buffer, fills it,
/// and sends it on; the consumer gives each buffer back with [`BlockReader::recycle`].
pub struct BlockReader<B: BlockBuffer> {
    filled: Receiver<Result<FilledBlock<B>>>,
    free: Option<SyncSender<B>>,
    handle: Option<JoinHandle<ReaderStats>>,
}

impl<B: BlockBuffer> BlockReader<B> {
    /// Starts reading the scan's time axis from slot `first` on ([`Scan::slot`], repeats
    /// included) into `buffers` (each exactly `BLOCSIZE` bytes long; at least one).
    pub fn spawn(scan: &Scan, first: usize, buffers: Vec<B>) -> Self {
        assert!(!buffers.is_empty(), "the ring needs at least one buffer");
        let n = buffers.len();
        let (free_tx, free_rx) = sync_channel::<B>(n);
        let (filled_tx, filled_rx) = sync_channel(n);
        for b in buffers {
            assert_eq!(b.size(), scan.geometry.blocsize, "ring buffer size");
            free_tx.send(b).expect("receiver alive");
        }
        let files = scan.files.clone();
        // One pass's slots, gone through as often as the scan repeats them.
        let slots = scan.slots.clone();
        let total = scan.slot_count();
        let handle = std::thread::Builder::new()
            .name("raw-reader".into())
            .spawn(move || {
                let mut stats = ReaderStats::default();
                let mut open: Option<(usize, File)> = None;
                let axis = (first.min(total)..total).map(|i| slots[i % slots.len()]);
                for (seq, kind) in axis.enumerate() {
                    let Ok(mut buf) = free_rx.recv() else { break };
                    // Timed inside the closure: a pinned buffer's fill first waits for the
                    // copy to the GPU that still reads it, which is not reading.
                    let res = buf
                        .fill_with(|bytes| {
                            let t = Instant::now();
                            let r = fill(&files, &mut open, kind, bytes);
                            stats.read_time += t.elapsed();
                            r
                        })
                        .and_then(|r| r);
                    let msg = res.map(|bytes| {
                        stats.bytes_read += bytes;
                        FilledBlock {
                            seq: seq as u64,
                            slot: first + seq,
                            kind,
                            buf,
                        }
                    });
                    let failed = msg.is_err();
                    if filled_tx.send(msg).is_err() || failed {
                        break;
                    }
                }
                stats
            })
            .expect("spawn reader thread");
        BlockReader {
            filled: filled_rx,
            free: Some(free_tx),
            handle: Some(handle),
        }
    }

    /// The next filled block, in time order; `None` after the last.
    pub fn next_block(&self) -> Option<Result<FilledBlock<B>>> {
        self.filled.recv().ok()
    }

    /// Gives a buffer back to the ring.
    pub fn recycle(&self, buf: B) {
        if let Some(free) = &self.free {
            // The reader may have finished; then the buffer is simply dropped.
            let _ = free.try_send(buf);
        }
    }

    /// Stops the thread (if still running) and returns its statistics.
    pub fn finish(mut self) -> ReaderStats {
        self.free = None;
        // Drain so that a thread blocked on sending can finish.
        while self.filled.try_recv().is_ok() {}
        self.handle
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    }
}

impl<B: BlockBuffer> Drop for BlockReader<B> {
    fn drop(&mut self) {
        self.free = None;
        if let Some(h) = self.handle.take() {
            while self.filled.try_recv().is_ok() {}
            // The thread ends: it either finds the free channel closed or its send fails once the
            // receiver is dropped with `self`. Do not join here (it may be blocked on a send to
            // the receiver we still hold); detach it.
            drop(h);
        }
    }
}

/// Reads into all of `buf` from `offset` (fewer bytes only at the end of the file).
fn read_full_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

fn fill(
    files: &[PathBuf],
    open: &mut Option<(usize, File)>,
    kind: SlotKind,
    buf: &mut [u8],
) -> Result<u64> {
    match kind {
        SlotKind::Gap => {
            buf.fill(0);
            Ok(0)
        }
        SlotKind::Data {
            file,
            block,
            offset,
        } => {
            let path = &files[file];
            if open.as_ref().map(|(i, _)| *i) != Some(file) {
                *open = Some((file, File::open(path).map_err(|e| Error::io(path, e))?));
            }
            let f = &open.as_ref().expect("just opened").1;
            // Positional reads of 256 KiB pieces on every core: one thread copying from the
            // page cache is slower than the GPU consumes blocks. Measured on the 16-core GPU
            // machine (32 MiB blocks from a 4 GiB file in the page cache, `gpu-session
            // readprobe`): 256 KiB pieces 69–71 GB/s, 1 MiB 57–58, 4 MiB 37–40, 32 MiB (one
            // read per block) 8 GB/s.
            const PIECE: usize = 256 << 10;
            let n = buf
                .par_chunks_mut(PIECE)
                .enumerate()
                .map(|(i, piece)| read_full_at(f, piece, offset + (i * PIECE) as u64))
                .try_reduce(|| 0, |a, b| Ok(a + b))
                .map_err(|e| Error::io(path, e))?;
            if n != buf.len() {
                return Err(Error::io(
                    path,
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("block {block} shorter than when the scan was indexed"),
                    ),
                ));
            }
            Ok(n as u64)
        }
    }
}
