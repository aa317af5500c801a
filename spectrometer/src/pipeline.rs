//! A run: the reader thread fills a bounded ring of block buffers, the engine (this thread)
//! turns blocks into integrations, a writer thread writes them to filterbank files (and
//! collects the plots). Outputs are written under temporary names in the output directory and
//! renamed together when the whole stem has succeeded; on any error, or a signal, they are
//! removed ([`crate::output`]).

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::mpsc::sync_channel;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::cpu::CpuEngine;
use crate::engine::{Engine, Integration};
use crate::error::{Error, Result};
use crate::filterbank::{pack_sexagesimal, telescope_id, FilterbankHeader};
use crate::output::{remove_stale, Stale, Temporaries};
use crate::plan::{OutputId, Plan, ProductSpec, Selection};
use crate::plot::PlotData;
use crate::rawspec::{headers_base, output_base, write_headers, Naming};
use crate::scan::{BlockReader, Scan, ScanOptions, SlotKind};

mod writer;
use writer::{writer_loop, FilWriter, Sink, SpectraFile, WRITEBACK_EVERY};

/// Which engine computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EngineKind {
    /// [`CpuEngine`].
    #[default]
    Cpu,
    /// [`GpuEngine`](crate::gpu::GpuEngine) on a GPU, with the work issued as a graph or on a
    /// stream.
    Gpu {
        /// The GPU's ordinal.
        ordinal: usize,
        /// Graph (one launch per block) or plain stream operations.
        mode: crate::gpu::GpuMode,
    },
}

/// The format of the spectra files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// SIGPROC filterbank, `.fil` ([`crate::filterbank`]).
    #[default]
    Filterbank,
    /// FBH5, Breakthrough Listen's HDF5 filterbank, `.h5` (the `fbh5` module; a build with the
    /// `fbh5` feature, otherwise [`Error::Unsupported`]).
    Fbh5,
}

impl OutputFormat {
    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            OutputFormat::Filterbank => "fil",
            OutputFormat::Fbh5 => "h5",
        }
    }

    /// Whether this build can write the format.
    pub fn available(self) -> bool {
        match self {
            OutputFormat::Filterbank => true,
            OutputFormat::Fbh5 => cfg!(feature = "fbh5"),
        }
    }
}

/// The error for a format this build cannot write.
fn unavailable(format: OutputFormat) -> Error {
    Error::Unsupported(format!(
        ".{} output needs a build with the fbh5 feature (cargo build --release -p \
         cudagraph-spectrometer --features fbh5; see the README)",
        format.extension()
    ))
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Stems (or any file of each sequence), processed in turn.
    pub inputs: Vec<PathBuf>,
    /// Output directory (created if absent).
    pub out_dir: PathBuf,
    /// Products (1 to [`crate::plan::MAX_PRODUCTS`]).
    pub products: Vec<ProductSpec>,
    /// Channel, antenna and time selection.
    pub selection: Selection,
    /// Engine.
    pub engine: EngineKind,
    /// Buffers in the reader's ring (≥ 1).
    pub ring: usize,
    /// Also write a PNG per (product, output).
    pub png: bool,
    /// Show a progress bar (on stderr, when it is a terminal).
    pub progress: bool,
    /// `telescope_id` to write (None: from `TELESCOP`).
    pub telescope_id: Option<i32>,
    /// `machine_id` to write.
    pub machine_id: i32,
    /// How outputs are named.
    pub naming: Naming,
    /// Also write every block's header to one file (rawspec's `-H`).
    pub save_headers: bool,
    /// The spectra files' format.
    pub format: OutputFormat,
    /// How each input is indexed (the gap limit).
    pub scan: ScanOptions,
    /// A soak test: each scan read this many times over as one continuous recording
    /// ([`Scan::repeated`]); above 1, device memory and host RSS are noted every
    /// [`SOAK_SAMPLE_EVERY`] ([`StemReport::memory`]) and printed on standard error as they are
    /// taken. 1 for a plain run.
    pub repeat: usize,
}

/// How often a soak run ([`RunConfig::repeat`]) notes memory.
pub const SOAK_SAMPLE_EVERY: Duration = Duration::from_secs(30);

/// Memory in use at one moment of a run.
#[derive(Debug, Clone, Copy)]
pub struct MemorySample {
    /// Since the run started.
    pub elapsed: Duration,
    /// Blocks processed so far.
    pub blocks: usize,
    /// Device memory in use on the engine's GPU (all processes), bytes ([`Engine::device_memory_in_use`]).
    pub device_in_use: Option<u64>,
    /// The process's resident host memory, bytes ([`host_rss`]).
    pub host_rss: Option<u64>,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            inputs: Vec::new(),
            out_dir: PathBuf::from("."),
            products: Vec::new(),
            selection: Selection::default(),
            engine: EngineKind::Cpu,
            ring: 4,
            png: false,
            progress: false,
            telescope_id: None,
            machine_id: 0,
            naming: Naming::Native,
            save_headers: false,
            format: OutputFormat::Filterbank,
            scan: ScanOptions::default(),
            repeat: 1,
        }
    }
}

/// What a stem's run did.
#[derive(Debug, Clone)]
pub struct StemReport {
    /// The stem.
    pub stem: PathBuf,
    /// The plan that ran.
    pub plan: Plan,
    /// Files written (filterbank, then the headers file, then PNG), final names.
    pub outputs: Vec<PathBuf>,
    /// Blocks read from files.
    pub data_blocks: usize,
    /// Zero blocks filling gaps.
    pub gap_blocks: usize,
    /// Bytes read.
    pub bytes_read: u64,
    /// Wall time.
    pub wall: Duration,
    /// Time in reads (reader thread).
    pub read: Duration,
    /// The engine's phases.
    pub engine: Vec<(&'static str, Duration)>,
    /// Time writing the spectra files (writer thread), [`StemReport::sync`] not included.
    pub write: Duration,
    /// Time closing the spectra files and waiting for them to reach the disk (writer thread,
    /// after the last integration; their write-back starts while they are written).
    pub sync: Duration,
    /// Time drawing and writing the PNGs (writer thread, after the last integration).
    pub plots: Duration,
    /// The scan's gaps, truncations and other warnings ([`Scan::report_lines`]; not part of
    /// the summary's `Display`: the command line prints them before the run starts).
    pub messages: Vec<String>,
    /// Unfinished outputs of earlier, interrupted runs found in the output directory (and
    /// removed where their process is gone).
    pub cleanup: Vec<Stale>,
    /// The process's peak resident host memory so far, bytes ([`host_peak_rss`]).
    pub host_peak_rss: Option<u64>,
    /// Device memory the engine allocated for its buffers, bytes ([`Engine::device_bytes`]).
    pub device_bytes: usize,
    /// With [`RunConfig::repeat`] above 1: memory after the first block, every
    /// [`SOAK_SAMPLE_EVERY`], and at the end (empty otherwise).
    pub memory: Vec<MemorySample>,
}

/// The process's peak resident set size (`VmHWM` of `/proc/self/status`), bytes: since the
/// process started, or since `5` was last written to `/proc/self/clear_refs`. `None` where
/// the system does not say (no `/proc`).
pub fn host_peak_rss() -> Option<u64> {
    proc_status_bytes("VmHWM:")
}

/// The process's resident set size now (`VmRSS` of `/proc/self/status`), bytes; `None` where
/// the system does not say.
pub fn host_rss() -> Option<u64> {
    proc_status_bytes("VmRSS:")
}

/// A `kB` field of `/proc/self/status`, bytes.
fn proc_status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

impl StemReport {
    /// Seconds of recording processed.
    pub fn recording_seconds(&self) -> f64 {
        self.plan.samples as f64 * self.plan.info.tbin
    }

    /// Input bytes per second of wall time.
    pub fn input_rate(&self) -> f64 {
        self.bytes_read as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// Real-time factor: recording seconds per wall second (> 1: faster than the recorder).
    pub fn realtime_factor(&self) -> f64 {
        self.recording_seconds() / self.wall.as_secs_f64().max(1e-9)
    }
}

impl std::fmt::Display for StemReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wall = self.wall.as_secs_f64();
        writeln!(f, "stem {}:", self.stem.display())?;
        for c in &self.cleanup {
            writeln!(f, "  {c}")?;
        }
        writeln!(
            f,
            "  blocks: {} ({} read, {} zero-filled gap), samples per channel: {} ({:.6} s of recording)",
            self.data_blocks + self.gap_blocks,
            self.data_blocks,
            self.gap_blocks,
            self.plan.samples,
            self.recording_seconds()
        )?;
        writeln!(
            f,
            "  input: {} in {:.3} s = {:.4} GB/s, real-time factor {:.3}",
            human_bytes(self.bytes_read),
            wall,
            self.input_rate() / 1e9,
            self.realtime_factor()
        )?;
        let pct = |d: &Duration| 100.0 * d.as_secs_f64() / wall.max(1e-9);
        write!(
            f,
            "  time: read {:.3} s ({:.0}%)",
            self.read.as_secs_f64(),
            pct(&self.read)
        )?;
        for (name, d) in &self.engine {
            write!(f, ", {name} {:.3} s ({:.0}%)", d.as_secs_f64(), pct(d))?;
        }
        write!(
            f,
            ", write {:.3} s ({:.0}%), sync {:.3} s ({:.0}%)",
            self.write.as_secs_f64(),
            pct(&self.write),
            self.sync.as_secs_f64(),
            pct(&self.sync)
        )?;
        if !self.plots.is_zero() {
            write!(
                f,
                ", plots {:.3} s ({:.0}%)",
                self.plots.as_secs_f64(),
                pct(&self.plots)
            )?;
        }
        writeln!(f, " — reader, engine and writer run concurrently")?;
        match self.host_peak_rss {
            Some(rss) => write!(f, "  memory: host peak RSS {}", human_bytes(rss))?,
            None => write!(f, "  memory: host peak RSS unknown")?,
        }
        if self.device_bytes > 0 {
            write!(
                f,
                ", device buffers {}",
                human_bytes(self.device_bytes as u64)
            )?;
        }
        writeln!(f)?;
        for p in &self.plan.products {
            writeln!(
                f,
                "  product {}: {}x{} {} → {} integration(s) of {} IF × {} channels, tsamp {:.6e} s, fch1 {:.6} MHz, foff {:.6e} MHz{}",
                p.index,
                p.nfft,
                p.nint,
                p.detection.name(),
                p.integrations,
                p.nifs,
                p.nchans,
                p.tsamp,
                p.fch1,
                p.foff,
                if p.dropped_samples > 0 {
                    format!(", last {} sample(s) per channel dropped (no whole integration)", p.dropped_samples)
                } else {
                    String::new()
                }
            )?;
        }
        for o in &self.outputs {
            writeln!(f, "  wrote {}", o.display())?;
        }
        Ok(())
    }
}

fn human_bytes(n: u64) -> String {
    let n = n as f64;
    if n >= 1e9 {
        format!("{:.3} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.3} MB", n / 1e6)
    } else {
        format!("{:.3} kB", n / 1e3)
    }
}

/// Runs every input of `cfg` in turn; stops at the first error (outputs of stems already done
/// stay, the failing stem leaves none).
pub fn run(cfg: &RunConfig) -> Result<Vec<StemReport>> {
    if cfg.products.len() > crate::plan::MAX_PRODUCTS {
        return Err(Error::TooManyProducts {
            count: cfg.products.len(),
            max: crate::plan::MAX_PRODUCTS,
        });
    }
    let mut reports = Vec::new();
    for input in &cfg.inputs {
        let scan = Scan::open_with(input, &cfg.scan)?;
        let plan = Plan::new(&scan, &cfg.products, &cfg.selection)?;
        let report = match cfg.engine {
            EngineKind::Cpu => run_stem(&scan, &plan, &mut CpuEngine::new(&plan)?, cfg)?,
            EngineKind::Gpu { ordinal, mode } => run_stem(
                &scan,
                &plan,
                &mut crate::gpu::GpuEngine::new(&plan, ordinal, mode)?,
                cfg,
            )?,
        };
        reports.push(report);
    }
    Ok(reports)
}

/// The filterbank header of (product, output) of `plan` over `scan`; an error when a count does
/// not fit the header's 32-bit integers.
pub fn filterbank_header(
    scan: &Scan,
    plan: &Plan,
    product: usize,
    output: usize,
    telescope: Option<i32>,
    machine_id: i32,
) -> Result<FilterbankHeader> {
    let p = &plan.products[product];
    let info = &plan.info;
    let int = |what: &str, v: usize| {
        i32::try_from(v).map_err(|_| Error::InvalidProduct {
            spec: format!("{}x{}", p.nfft, p.nint),
            reason: format!(
                "{what} = {v} does not fit the filterbank header (a 32-bit integer, at most {})",
                i32::MAX
            ),
        })
    };
    let (ibeam, nbeams) = match plan.outputs[output] {
        OutputId::Antenna(a) => (int("ibeam", a)?, int("nbeams", plan.geometry.nants)?),
        OutputId::Sum => (0, 1),
    };
    Ok(FilterbankHeader {
        telescope_id: telescope.unwrap_or_else(|| telescope_id(&info.telescop)),
        machine_id,
        data_type: 1,
        rawdatafile: scan.files[0]
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source_name: info.src_name.clone(),
        src_raj: info
            .ra_str
            .as_deref()
            .and_then(pack_sexagesimal)
            .unwrap_or(0.0),
        src_dej: info
            .dec_str
            .as_deref()
            .and_then(pack_sexagesimal)
            .unwrap_or(0.0),
        tstart: p.tstart,
        tsamp: p.tsamp,
        fch1: p.fch1,
        foff: p.foff,
        nchans: int("nchans", p.nchans)?,
        nifs: int("nifs", p.nifs)?,
        nbits: 32,
        ibeam,
        nbeams,
    })
}

/// Runs one stem through `engine` (the plan must be for `scan`).
pub fn run_stem<E: Engine>(
    scan: &Scan,
    plan: &Plan,
    engine: &mut E,
    cfg: &RunConfig,
) -> Result<StemReport> {
    let start = Instant::now();
    let dir = &cfg.out_dir;
    if dir.exists() && !dir.is_dir() {
        return Err(Error::OutputDir {
            path: dir.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                "it exists and is not a directory",
            ),
        });
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::OutputDir {
        path: dir.clone(),
        source: e,
    })?;
    let name = scan.name();
    let mut headers = Vec::new();
    for pi in 0..plan.products.len() {
        for oi in 0..plan.outputs.len() {
            headers.push(filterbank_header(
                scan,
                plan,
                pi,
                oi,
                cfg.telescope_id,
                cfg.machine_id,
            )?);
        }
    }
    let bases: Vec<(usize, usize, String)> = (0..plan.products.len())
        .flat_map(|pi| (0..plan.outputs.len()).map(move |oi| (pi, oi)))
        .map(|(pi, oi)| (pi, oi, output_base(cfg.naming, plan, &name, pi, oi)))
        .collect();
    if !cfg.format.available() {
        return Err(unavailable(cfg.format));
    }
    let ext = cfg.format.extension();
    let mut exts = vec![ext];
    if cfg.png {
        exts.push("png");
    }
    let mut stale_keys: Vec<(String, &str)> = bases
        .iter()
        .flat_map(|(_, _, b)| exts.iter().map(move |e| (b.clone(), *e)))
        .collect();
    if cfg.save_headers {
        stale_keys.push((headers_base(cfg.naming, &name), "headers"));
    }
    let cleanup = remove_stale(dir, &stale_keys)?;
    let mut temps = Temporaries::new();
    let mut sinks: Vec<Vec<Sink>> = (0..plan.products.len()).map(|_| Vec::new()).collect();
    for ((pi, _, base), header) in bases.iter().zip(&headers) {
        let p = &plan.products[*pi];
        let (file, tmp) = match cfg.format {
            OutputFormat::Filterbank => {
                let (file, tmp) = temps.create(dir, base, ext)?;
                let file = FilWriter::new(file, &header.to_bytes(), WRITEBACK_EVERY)
                    .map_err(|e| Error::io(&tmp, e))?;
                (SpectraFile::Filterbank(file), tmp)
            }
            #[cfg(feature = "fbh5")]
            OutputFormat::Fbh5 => {
                let tmp = temps.reserve(dir, base, ext)?;
                let nints = usize::try_from(p.integrations).map_err(|_| {
                    Error::Unsupported(format!("{} integrations on this platform", p.integrations))
                })?;
                let w = Temporaries::write_with(&tmp, || {
                    crate::fbh5::Fbh5Writer::create(&tmp, header, nints)
                })
                .map_err(|e| Error::io(&tmp, e))??;
                (SpectraFile::Fbh5(w), tmp)
            }
            #[cfg(not(feature = "fbh5"))]
            OutputFormat::Fbh5 => return Err(unavailable(cfg.format)),
        };
        let title = format!(
            "{base}: {}X{} {} ({}), {} INTEGRATION(S) OF {:.4e} S",
            p.nfft,
            p.nint,
            p.detection.name(),
            p.detection.if_labels()[0],
            p.integrations,
            p.tsamp
        );
        sinks[*pi].push(Sink {
            file,
            path: tmp,
            written: 0,
            plot: cfg.png.then(|| {
                (
                    PlotData::new(p.nchans, p.integrations, p.fch1, p.foff, p.tsamp, title),
                    PathBuf::new(),
                )
            }),
        });
    }
    if cfg.save_headers {
        let (file, tmp) = temps.create(dir, &headers_base(cfg.naming, &name), "headers")?;
        let mut file = BufWriter::new(file);
        write_headers(scan, &mut file)?;
        file.flush().map_err(|e| Error::io(&tmp, e))?;
    }
    // The PNGs come after every other output (the order of `StemReport::outputs`).
    for (pi, oi, base) in &bases {
        if let Some((_, path)) = &mut sinks[*pi][*oi].plot {
            *path = temps.reserve(dir, base, "png")?;
        }
    }

    let g = plan.geometry;
    let mut buffers = Vec::with_capacity(cfg.ring.max(1));
    for _ in 0..cfg.ring.max(1) {
        buffers.push(engine.alloc_buffer(g.blocsize)?);
    }
    let reader = BlockReader::spawn(scan, plan.first_slot, buffers);
    let soak = cfg.repeat > 1;
    let mut memory = Vec::new();
    let mut next_sample = start;
    let (tx, rx) = sync_channel::<Vec<Integration>>(8);
    let wplan = plan.clone();
    let pool = engine.spectra_pool().clone();
    let writer = std::thread::Builder::new()
        .name("fil-writer".into())
        .spawn(move || writer_loop(rx, sinks, wplan, pool))
        .map_err(|e| Error::Engine(format!("cannot start the writer thread: {e}")))?;

    let pb = if cfg.progress {
        let pb = ProgressBar::new(plan.blocks as u64 * g.blocsize as u64);
        pb.set_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{elapsed_precise}] {wide_bar} {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec} ETA {eta}",
            )
            .expect("valid template"),
        );
        pb
    } else {
        ProgressBar::hidden()
    };
    let mut data_blocks = 0usize;
    let mut gap_blocks = 0usize;
    let mut writer_gone = false;
    let result = (|| -> Result<()> {
        let mut out = Vec::new();
        while let Some(item) = reader.next_block() {
            let fb = item?;
            match fb.kind {
                SlotKind::Data { .. } => data_blocks += 1,
                SlotKind::Gap => gap_blocks += 1,
            }
            engine.process_filled(&fb, &g, &mut out)?;
            reader.recycle(fb.buf);
            if soak && Instant::now() >= next_sample {
                memory.push(sample(start, data_blocks + gap_blocks, engine));
                next_sample = Instant::now() + SOAK_SAMPLE_EVERY;
            }
            if !out.is_empty() && tx.send(std::mem::take(&mut out)).is_err() {
                writer_gone = true;
                return Ok(());
            }
            pb.set_message(format!(
                "block {}/{}",
                data_blocks + gap_blocks,
                plan.blocks
            ));
            pb.inc(g.blocsize as u64);
        }
        engine.finish(&mut out)?;
        if !out.is_empty() && tx.send(out).is_err() {
            writer_gone = true;
        }
        if soak {
            memory.push(sample(start, data_blocks + gap_blocks, engine));
        }
        Ok(())
    })();
    drop(tx);
    pb.finish_and_clear();
    let wres = writer
        .join()
        .unwrap_or_else(|_| Err(Error::Engine("the writer thread panicked".into())));
    let rstats = reader.finish();
    result?;
    let wdone = wres?;
    if writer_gone {
        return Err(Error::Engine("the writer stopped early".into()));
    }
    let outputs = temps.commit()?;
    Ok(StemReport {
        stem: scan.stem.clone(),
        plan: plan.clone(),
        outputs,
        data_blocks,
        gap_blocks,
        bytes_read: rstats.bytes_read,
        wall: start.elapsed(),
        read: rstats.read_time,
        engine: engine.timings(),
        write: wdone.write_time,
        sync: wdone.sync_time,
        plots: wdone.plot_time,
        messages: scan.report_lines(),
        cleanup,
        host_peak_rss: host_peak_rss(),
        device_bytes: engine.device_bytes(),
        memory,
    })
}

impl MemorySample {
    /// A byte count in MiB with one decimal, `-` when not known (how samples are printed).
    pub fn mib(bytes: Option<u64>) -> String {
        bytes.map_or("-".to_string(), |b| format!("{:.1}", b as f64 / 1048576.0))
    }
}

/// Notes memory now, and prints it on standard error as it is taken (a soak run that is
/// stopped early still shows what it saw).
fn sample<E: Engine>(start: Instant, blocks: usize, engine: &E) -> MemorySample {
    let m = MemorySample {
        elapsed: start.elapsed(),
        blocks,
        device_in_use: engine.device_memory_in_use(),
        host_rss: host_rss(),
    };
    let mib = MemorySample::mib;
    eprintln!(
        "soak: {:.0} s, {} blocks, device memory in use {} MiB, host RSS {} MiB",
        m.elapsed.as_secs_f64(),
        m.blocks,
        mib(m.device_in_use),
        mib(m.host_rss)
    );
    m
}
