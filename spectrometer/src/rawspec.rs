//! A drop-in for [rawspec](https://github.com/UCBerkeleySETI/rawspec)'s command line: its
//! options, its defaults and its output file names, mapped onto a [`RunConfig`](crate::pipeline::RunConfig), so that an
//! observatory script can switch programs by changing the program name.
//!
//! The mapping (rawspec's option → this program):
//!
//! | rawspec | here |
//! | --- | --- |
//! | `STEM ...` | the stems, each processed in turn (any one file `STEM.NNNN.raw`, or any other RAW file read alone, is accepted too) |
//! | `-f`, `--ffts N1[,N2...]` and `-t`, `--ints N1[,N2...]` | products `N1xT1`, …; the same number of each; at most 4; default `1048576,8,1024` × `51,128,3072` |
//! | `-p`, `--pols P1[,P2...]` | per product: `1` total power, `4` cross pols (`full`: XX, YY, Re XY\*, Im XY\*), `-4` Stokes (`iquv`); a missing entry repeats the previous one; 4 and -4 fall back to 1 for single-pol input, as in rawspec |
//! | `-d`, `--dest DIR` | output directory (default: the stem's own directory) |
//! | `-a`, `--ant ANT` | process antenna ANT only (ignored with `-S`, as in rawspec) |
//! | `-S`, `--splitant` | one output per antenna, `STEM-antNNN.rawspec.MMMM.fil`; implied when NANTS > 1 and neither `-S` nor `-i` is given |
//! | `-i`, `--ics W1[,W2...]` | the incoherent sum only, `STEM-ics.rawspec.MMMM.fil`, with per-antenna weights or one weight for all; `-S` is ignored with `-i`, as in rawspec |
//! | `-s`, `--schan C`, `-n`, `--nchan N` | the coarse channels `C .. C+N` (per antenna); `-s` needs `-n`, as in rawspec |
//! | `-o`, `--outidx N` | the first output index: product `i` is written as `.rawspec.{N+i:04}` |
//! | `-j`, `--fbh5` | FBH5 (`.h5`) instead of SIGPROC filterbank (a build with the `fbh5` feature) |
//! | `-H`, `--hdrs` | also write `DEST/STEM.rawspec.headers`: every block's header, `END` card included, padding left out, in scan order |
//! | `-g`, `--gpu IDX` | the GPU engine on GPU IDX. Without `-g`: GPU 0 when one is usable, else the CPU engine (said on standard error) |
//! | `-z`, `--debug` | also print the plan (products, axes, outputs) |
//! | `-v`, `--version` | print the version and exit |
//! | `-b`, `--batch BC` | accepted and ignored: the engines choose their own batching |
//! | `-r`, `--rate GBPS` | accepted only with network output, which is not supported: refused |
//! | `-d HOST:PORT` | network (UDP) output: not supported, refused with the reason |
//!
//! Not supported, each refused with a typed error naming the option rather than run differently:
//! network output (`-d HOST:PORT`, `-r`), and `-s`/`-n` together with several antennas and no
//! `-a` (rawspec then counts channels across all antennas, then splits the output per antenna;
//! this program selects channels per antenna).
//!
//! Where the outputs differ from rawspec's:
//! - `tstart` includes `STT_OFFS` (rawspec uses `STT_IMJD + STT_SMJD/86400`);
//! - `telescope_id` is 0 for an unknown `TELESCOP` (rawspec: -1); `machine_id` is rawspec's 20;
//! - Stokes U and V are `2 Re(X·Y*)` and `−2 Im(X·Y*)` (rawspec: `Re(X·Y*)`, `Im(X·Y*)`, with a
//!   TODO in its source on their sign and scale);
//! - `ibeam` is the antenna of a split output (0 for the sum) and `nbeams` NANTS (rawspec:
//!   `BEAM_ID` or -1, and 1).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::plan::{AntennaMode, Detection, ProductSpec, Selection, MAX_PRODUCTS};
use crate::scan::{stem_of, Scan};

/// rawspec's default products: `-f 1048576,8,1024 -t 51,128,3072`.
pub const DEFAULT_PRODUCTS: [(usize, usize); 3] = [(1 << 20, 51), (8, 128), (1024, 3072)];

/// rawspec's `machine_id`.
pub const MACHINE_ID: i32 = 20;

/// rawspec's options, as parsed from its command line (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawspecOptions {
    /// `-f`: FFT lengths.
    pub ffts: Vec<usize>,
    /// `-t`: spectra integrated.
    pub ints: Vec<usize>,
    /// `-p`: output polarisations per product (1, 4 or -4).
    pub pols: Vec<i32>,
    /// `-d`: destination directory (or `HOST:PORT`, refused).
    pub dest: Option<String>,
    /// `-a`: one antenna.
    pub ant: Option<usize>,
    /// `-S`: split outputs per antenna.
    pub splitant: bool,
    /// `-i`: incoherent-sum weights.
    pub ics: Option<Vec<f32>>,
    /// `-s`: first coarse channel.
    pub schan: usize,
    /// `-n`: coarse channels (0: all).
    pub nchan: usize,
    /// `-o`: first output index.
    pub outidx: usize,
    /// `-j`: FBH5 output.
    pub fbh5: bool,
    /// `-H`: write the headers file.
    pub hdrs: bool,
    /// `-r`: network rate (refused: no network output).
    pub rate: Option<f64>,
}

/// How outputs are named ([`crate::pipeline::RunConfig::naming`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Naming {
    /// This program's own: `STEM.P`, `STEM.antA.P`, `STEM.sum.P`.
    #[default]
    Native,
    /// rawspec's: `STEM.rawspec.NNNN` (NNNN = `outidx` + product), `STEM-antAAA.rawspec.NNNN`
    /// when antennas are split, `STEM-ics.rawspec.NNNN` for the incoherent sum.
    Rawspec {
        /// The first output index (`-o`).
        outidx: usize,
        /// Whether every antenna has its own file (`-S`).
        split: bool,
    },
}

/// A rawspec-style request for one stem, ready for [`crate::pipeline::run_stem`].
#[derive(Debug, Clone, PartialEq)]
pub struct StemRequest {
    /// Products.
    pub products: Vec<ProductSpec>,
    /// Selection.
    pub selection: Selection,
    /// Output directory.
    pub out_dir: PathBuf,
    /// Output naming.
    pub naming: Naming,
    /// Notes to print (fallbacks rawspec makes silently, ignored options).
    pub notes: Vec<String>,
}

fn bad(option: &str, reason: impl Into<String>) -> Error {
    Error::Rawspec {
        option: option.to_string(),
        reason: reason.into(),
    }
}

impl RawspecOptions {
    /// Checks the options that do not depend on the scan (rawspec's own checks, in its order).
    pub fn check(&self) -> Result<()> {
        if let Some(d) = &self.dest {
            if d.contains(':') {
                return Err(bad(
                    "-d",
                    format!("{d:?} is HOST:PORT: network (UDP) output is not supported; give a directory"),
                ));
            }
        }
        if self.rate.is_some() {
            return Err(bad(
                "-r",
                "the rate applies to network output, which is not supported",
            ));
        }
        if self.schan != 0 && self.nchan == 0 {
            return Err(bad(
                "-s",
                "nchan (-n) must be non-zero if schan is non-zero",
            ));
        }
        if self.ffts.len() != self.ints.len() {
            return Err(bad(
                "-f/-t",
                format!(
                    "must specify same number of FFT and integration lengths ({} and {})",
                    self.ffts.len(),
                    self.ints.len()
                ),
            ));
        }
        if self.ffts.len() > MAX_PRODUCTS {
            return Err(Error::TooManyProducts {
                count: self.ffts.len(),
                max: MAX_PRODUCTS,
            });
        }
        if self.pols.len() > MAX_PRODUCTS {
            return Err(bad(
                "-p",
                format!("up to {MAX_PRODUCTS} pol modes supported"),
            ));
        }
        if let Some(p) = self.pols.iter().find(|p| !matches!(p, 1 | 4 | -4)) {
            return Err(bad(
                "-p",
                format!("number of output pols must be 1 or +/- 4, not {p}"),
            ));
        }
        if self.ffts.iter().chain(&self.ints).any(|&n| n == 0) {
            return Err(bad("-f/-t", "FFT and integration lengths must be positive"));
        }
        Ok(())
    }

    /// The output directory and base name of `stem`'s outputs: `DEST` (or the stem's own
    /// directory) and the stem's file name.
    pub fn destination(&self, stem: &Path) -> (PathBuf, String) {
        let stem = stem_of(stem);
        let base = stem
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "scan".into());
        let dir = match &self.dest {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => match stem.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        };
        (dir, base)
    }

    /// The request for one scan: products, selection, destination and naming, with rawspec's
    /// rules applied (see the module docs).
    pub fn request(&self, scan: &Scan) -> Result<StemRequest> {
        self.check()?;
        let g = scan.geometry;
        let mut notes = Vec::new();
        let pairs: Vec<(usize, usize)> = if self.ffts.is_empty() {
            notes.push("using default FFT and integration lengths".to_string());
            DEFAULT_PRODUCTS.to_vec()
        } else {
            self.ffts
                .iter()
                .copied()
                .zip(self.ints.iter().copied())
                .collect()
        };
        let mut products = Vec::with_capacity(pairs.len());
        let mut pol = 1;
        for (i, &(nfft, nint)) in pairs.iter().enumerate() {
            if let Some(&p) = self.pols.get(i) {
                pol = p;
            }
            let mut detection = match pol {
                4 => Detection::FullPol,
                -4 => Detection::Stokes,
                _ => Detection::TotalPower,
            };
            if detection != Detection::TotalPower && g.npol < 2 {
                notes.push(format!(
                    "product {i}: -p {pol} needs two polarisations; the scan has one: total power written (as rawspec does)"
                ));
                detection = Detection::TotalPower;
            }
            products.push(ProductSpec {
                nfft,
                nint,
                detection,
            });
        }
        // Antennas: -i wins over -S; NANTS > 1 without either implies -S; -S ignores -a.
        let ics = self.ics.is_some();
        let split = !ics && (self.splitant || g.nants > 1);
        if ics && self.splitant {
            notes.push("-S (split antennas) is ignored with -i, as in rawspec".to_string());
        }
        if g.nants > 1 && !self.splitant && !ics {
            notes.push(format!(
                "NANTS = {} > 1: one output per antenna (-S), as rawspec does without -S or -i",
                g.nants
            ));
        }
        let antenna = match self.ant {
            Some(_) if split && g.nants > 1 => {
                notes.push(
                    "-a is ignored: the output is split per antenna (-S), as in rawspec".into(),
                );
                None
            }
            a => a,
        };
        if self.nchan != 0 && g.nants > 1 && antenna.is_none() {
            return Err(bad(
                "-s/-n",
                format!(
                    "with NANTS = {} (and no -i -a), rawspec counts these channels across all antennas, then splits the output per antenna; this program selects channels per antenna: leave -s/-n out, or use `run --chan-start C --nchan N`",
                    g.nants
                ),
            ));
        }
        let weights = match &self.ics {
            None => None,
            Some(w) => {
                let selected = if antenna.is_some() { 1 } else { g.nants };
                match w.len() {
                    1 => Some(vec![w[0]; selected]),
                    n if n == selected => Some(w.clone()),
                    n => {
                        return Err(bad(
                            "-i",
                            format!("{n} weights for {selected} antenna(s): give one per antenna, or one for all"),
                        ))
                    }
                }
            }
        };
        let selection = Selection {
            chan_start: self.schan,
            nchan: (self.nchan != 0).then_some(self.nchan),
            antenna,
            mode: if ics {
                AntennaMode::Sum
            } else {
                AntennaMode::Separate
            },
            weights,
            skip_blocks: 0,
        };
        let (out_dir, _) = self.destination(&scan.stem);
        Ok(StemRequest {
            products,
            selection,
            out_dir,
            naming: Naming::Rawspec {
                outidx: self.outidx,
                split,
            },
            notes,
        })
    }
}

/// The name (without extension) of output `output` of product `product` for stem name `stem`
/// under `naming`.
pub fn output_base(
    naming: Naming,
    plan: &crate::plan::Plan,
    stem: &str,
    product: usize,
    output: usize,
) -> String {
    use crate::plan::OutputId;
    match naming {
        Naming::Native => plan.output_name(stem, product, output),
        Naming::Rawspec { outidx, split } => {
            let idx = outidx + product;
            match plan.outputs[output] {
                OutputId::Antenna(a) if split => format!("{stem}-ant{a:03}.rawspec.{idx:04}"),
                OutputId::Antenna(_) => format!("{stem}.rawspec.{idx:04}"),
                OutputId::Sum => format!("{stem}-ics.rawspec.{idx:04}"),
            }
        }
    }
}

/// The name (without extension) of the headers file of `stem` (`-H`).
pub fn headers_base(naming: Naming, stem: &str) -> String {
    match naming {
        Naming::Native => format!("{stem}.headers"),
        Naming::Rawspec { .. } => format!("{stem}.rawspec"),
    }
}

/// Every data block's header in scan order, from its first card to its `END` card (padding
/// left out), concatenated: what rawspec's `-H` writes.
pub fn write_headers(scan: &Scan, out: &mut impl std::io::Write) -> Result<u64> {
    use std::io::{Read, Seek, SeekFrom};
    let mut written = 0u64;
    let mut open: Option<(usize, std::fs::File)> = None;
    // Where the next block's header starts in each file: after the previous block's data.
    let mut next_start = vec![0u64; scan.files.len()];
    let mut buf = Vec::new();
    for slot in &scan.slots {
        let crate::scan::SlotKind::Data { file, offset, .. } = *slot else {
            continue;
        };
        let path = &scan.files[file];
        if open.as_ref().map(|(f, _)| *f) != Some(file) {
            open = Some((
                file,
                std::fs::File::open(path).map_err(|e| Error::io(path, e))?,
            ));
        }
        let f = &mut open.as_mut().expect("opened above").1;
        let start = next_start[file];
        let len = usize::try_from(offset - start).map_err(|_| {
            Error::io(
                path,
                std::io::Error::new(std::io::ErrorKind::InvalidData, "header too long"),
            )
        })?;
        buf.resize(len, 0);
        f.seek(SeekFrom::Start(start))
            .and_then(|_| f.read_exact(&mut buf))
            .map_err(|e| Error::io(path, e))?;
        // The header proper ends with its END card; DIRECTIO padding follows it.
        let end = buf
            .chunks_exact(80)
            .position(|card| card.starts_with(b"END") && card[3..].iter().all(|&b| b == b' '))
            .map_or(buf.len(), |i| (i + 1) * 80);
        out.write_all(&buf[..end]).map_err(|e| Error::io(path, e))?;
        written += end as u64;
        next_start[file] = offset + scan.geometry.data_len_on_disk();
    }
    Ok(written)
}
