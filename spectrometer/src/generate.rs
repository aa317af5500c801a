//! Synthetic GUPPI RAW scans: tones at chosen sky frequencies plus Gaussian noise, in any
//! geometry, optionally with dropped blocks (a `PKTIDX` gap) and a truncated last file.
//!
//! Samples are a pure function of (antenna, channel, polarisation, time) — a counter-based
//! generator, no state — so the `OVERLAP` samples repeated between blocks are identical, and a
//! test can ask [`GenerateSpec::quantized`] what any sample should decode to.
//!
//! A tone at sky frequency `f` (MHz) appears in the coarse channel `c` whose band holds it, as
//! `A·e^{2πi·b·t}` with baseband frequency `b = (f − f_c) × sign(chan_bw)` cycles per `|chan_bw|`
//! (and `t` in samples), i.e. the generator models an ideal filterbank whose spectrum is mirrored
//! when `OBSBW < 0` — the convention under which the spectrometer's output frequency axis
//! `fch1 + i × foff` is right for either sign.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::guppi::{encode_complex, pad_directio, Header, MAX_STRING_CHARS};

/// A tone.
#[derive(Debug, Clone, PartialEq)]
pub struct Tone {
    /// Sky frequency, MHz.
    pub freq_mhz: f64,
    /// Amplitude in X (quantisation levels).
    pub amp_x: f32,
    /// Amplitude in Y.
    pub amp_y: f32,
    /// Phase of Y relative to X, degrees (90: Y leads X by a quarter turn).
    pub phase_y_deg: f32,
}

impl Tone {
    /// A tone of amplitude `amp` in both polarisations, in phase.
    pub fn new(freq_mhz: f64, amp: f32) -> Tone {
        Tone {
            freq_mhz,
            amp_x: amp,
            amp_y: amp,
            phase_y_deg: 0.0,
        }
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateSpec {
    /// Output directory.
    pub dir: PathBuf,
    /// Stem file name (files are `stem.0000.raw`, …).
    pub stem: String,
    /// Coarse channels per antenna.
    pub nchan: usize,
    /// Antennas (`NANTS`; `OBSNCHAN = nants × nchan`).
    pub nants: usize,
    /// The `NPOL` value written: 1 (one complex pol), 2 or 4 (two complex pols).
    pub npol: usize,
    /// `NBITS`: 4, 8 or 16.
    pub nbits: usize,
    /// Time samples per block, overlap included.
    pub ntime: usize,
    /// `OVERLAP`.
    pub overlap: usize,
    /// `DIRECTIO` (pad header and data to 512 bytes).
    pub directio: bool,
    /// Blocks per file (before dropping).
    pub blocks_per_file: usize,
    /// Files.
    pub files: usize,
    /// `OBSFREQ`, MHz.
    pub obsfreq: f64,
    /// `OBSBW`, MHz (negative: channels run high to low).
    pub obsbw: f64,
    /// Tones.
    pub tones: Vec<Tone>,
    /// Noise standard deviation per real and imaginary part (quantisation levels).
    pub noise: f32,
    /// Noise seed.
    pub seed: u64,
    /// Per-antenna gain applied to tones and noise (empty: all 1).
    pub antenna_gains: Vec<f32>,
    /// Global block numbers (0-based, counting every block of every file) not written; `PKTIDX`
    /// still advances over them.
    pub drop_blocks: Vec<usize>,
    /// Bytes cut off the end of the last file (to end it mid-block).
    pub truncate_bytes: u64,
    /// `PKTIDX` step per block.
    pub pktidx_step: i64,
    /// Write `PIPERBLK` (the `PKTIDX` step per block, as hashpipe recorders write it) in every
    /// header.
    pub piperblk: bool,
    /// `STT_IMJD`.
    pub stt_imjd: i64,
    /// `STT_SMJD`.
    pub stt_smjd: i64,
    /// `STT_OFFS`.
    pub stt_offs: f64,
    /// `SRC_NAME`.
    pub src_name: String,
    /// `RA_STR`.
    pub ra_str: String,
    /// `DEC_STR`.
    pub dec_str: String,
    /// `TELESCOP`.
    pub telescop: String,
}

impl Default for GenerateSpec {
    fn default() -> Self {
        GenerateSpec {
            dir: PathBuf::from("."),
            stem: "synthetic".into(),
            nchan: 4,
            nants: 1,
            npol: 4,
            nbits: 8,
            ntime: 4096,
            overlap: 0,
            directio: false,
            blocks_per_file: 4,
            files: 1,
            obsfreq: 1420.0,
            obsbw: 12.5,
            tones: Vec::new(),
            noise: 4.0,
            seed: 1,
            antenna_gains: Vec::new(),
            drop_blocks: Vec::new(),
            truncate_bytes: 0,
            pktidx_step: 16,
            piperblk: false,
            stt_imjd: 60000,
            stt_smjd: 43200,
            stt_offs: 0.25,
            src_name: "SYNTH".into(),
            ra_str: "12:34:56.7800".into(),
            dec_str: "+12:34:56.7800".into(),
            telescop: "GBT".into(),
        }
    }
}

/// What [`generate`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateReport {
    /// Files written, in order.
    pub files: Vec<PathBuf>,
    /// Blocks written.
    pub blocks_written: usize,
    /// Blocks dropped.
    pub blocks_dropped: usize,
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Two independent standard normal values for a counter.
fn gauss2(key: u64) -> (f64, f64) {
    let a = splitmix(key);
    let b = splitmix(a ^ 0x5851_f42d_4c95_7f2d);
    let u1 = ((a >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    let r = (-2.0 * u1.ln()).sqrt();
    let th = std::f64::consts::TAU * u2;
    (r * th.cos(), r * th.sin())
}

impl GenerateSpec {
    /// Complex polarisations (1 or 2).
    pub fn complex_pols(&self) -> usize {
        if self.npol == 1 {
            1
        } else {
            2
        }
    }

    /// Signed coarse channel width, MHz.
    pub fn chan_bw(&self) -> f64 {
        self.obsbw / self.nchan as f64
    }

    /// `TBIN`, s: `1 / |chan_bw|`.
    pub fn tbin(&self) -> f64 {
        1e-6 / self.chan_bw().abs()
    }

    /// Centre of coarse channel `c`, MHz.
    pub fn coarse_centre(&self, c: usize) -> f64 {
        self.obsfreq - self.obsbw / 2.0 + (c as f64 + 0.5) * self.chan_bw()
    }

    /// `BLOCSIZE` (the generator checks that it fits; see [`GenerateSpec::try_blocsize`]).
    pub fn blocsize(&self) -> usize {
        self.nants * self.nchan * self.ntime * self.complex_pols() * 2 * self.nbits / 8
    }

    /// `BLOCSIZE`, or `None` when it does not fit a 64-bit header integer.
    pub fn try_blocsize(&self) -> Option<usize> {
        let bytes_per_complex = 2 * self.nbits / 8;
        let b = self
            .nants
            .checked_mul(self.nchan)?
            .checked_mul(self.ntime)?
            .checked_mul(self.complex_pols() * bytes_per_complex)?;
        i64::try_from(b).is_ok().then_some(b)
    }

    /// The unquantised sample of antenna `a`, channel `c` (per antenna), polarisation `pol` at
    /// absolute time `t` (samples from the scan start).
    pub fn sample(&self, a: usize, c: usize, pol: usize, t: u64) -> (f64, f64) {
        let gain = self.antenna_gains.get(a).copied().unwrap_or(1.0) as f64;
        let fc = self.coarse_centre(c);
        let half = self.chan_bw().abs() / 2.0;
        let sign = self.chan_bw().signum();
        let (mut re, mut im) = (0.0, 0.0);
        for tone in &self.tones {
            let b = (tone.freq_mhz - fc) * sign;
            if b < -half || b >= half {
                continue;
            }
            let (amp, ph0) = if pol == 0 {
                (tone.amp_x as f64, 0.0)
            } else {
                (tone.amp_y as f64, (tone.phase_y_deg as f64).to_radians())
            };
            // Phase in turns, reduced before the multiply by 2π to keep precision for large t.
            let turns = (b / self.chan_bw().abs() * t as f64).rem_euclid(1.0);
            let ph = std::f64::consts::TAU * turns + ph0;
            re += amp * ph.cos();
            im += amp * ph.sin();
        }
        if self.noise > 0.0 {
            let key = self.seed.wrapping_mul(0x2545_f491_4f6c_dd1d)
                ^ ((a as u64) << 56)
                ^ ((c as u64) << 40)
                ^ ((pol as u64) << 38)
                ^ t;
            let (n1, n2) = gauss2(key);
            re += self.noise as f64 * n1;
            im += self.noise as f64 * n2;
        }
        (gain * re, gain * im)
    }

    /// The sample as the file stores it (rounded and clipped to `NBITS`).
    pub fn quantized(&self, a: usize, c: usize, pol: usize, t: u64) -> (f32, f32) {
        let (re, im) = self.sample(a, c, pol, t);
        let mut b = [0u8; 4];
        encode_complex(self.nbits, re as f32, im as f32, &mut b);
        let g = crate::guppi::Geometry {
            blocsize: 2 * self.nbits / 8,
            obsnchan: 1,
            nants: 1,
            nchan_per_ant: 1,
            npol: 1,
            nbits: self.nbits,
            ntime: 1,
            overlap: 0,
            directio: false,
        };
        let mut out = [num_complex::Complex32::default()];
        g.decode(&b, 0, 0, 0, &mut out);
        (out[0].re, out[0].im)
    }

    /// The header of global block `n`.
    pub fn header(&self, n: usize) -> Header {
        let mut h = Header::default();
        h.set_str("BACKEND", "GUPPI");
        h.set_str("TELESCOP", &self.telescop);
        h.set_str("SRC_NAME", &self.src_name);
        h.set_str("RA_STR", &self.ra_str);
        h.set_str("DEC_STR", &self.dec_str);
        h.set_float("OBSFREQ", self.obsfreq);
        h.set_float("OBSBW", self.obsbw);
        h.set_float("CHAN_BW", self.chan_bw());
        h.set_float("TBIN", self.tbin());
        h.set_int("OBSNCHAN", (self.nants * self.nchan) as i64);
        h.set_int("NANTS", self.nants as i64);
        h.set_int("NPOL", self.npol as i64);
        h.set_int("NBITS", self.nbits as i64);
        h.set_int("BLOCSIZE", self.blocsize() as i64);
        h.set_int("OVERLAP", self.overlap as i64);
        h.set_int("DIRECTIO", self.directio as i64);
        h.set_int("STT_IMJD", self.stt_imjd);
        h.set_int("STT_SMJD", self.stt_smjd);
        h.set_float("STT_OFFS", self.stt_offs);
        h.set_int("PKTIDX", n as i64 * self.pktidx_step);
        if self.piperblk {
            h.set_int("PIPERBLK", self.pktidx_step);
        }
        h.set_int("PKTSIZE", 8192);
        h.set_str("DATATYPE", "FLOAT");
        h
    }

    /// The data bytes of global block `n` (`BLOCSIZE` bytes).
    pub fn block_data(&self, n: usize) -> Vec<u8> {
        let npol = self.complex_pols();
        let bpc = 2 * self.nbits / 8;
        let per_chan = self.ntime * npol * bpc;
        let mut data = vec![0u8; self.blocsize()];
        let t0 = (n * (self.ntime - self.overlap)) as u64;
        data.par_chunks_mut(per_chan)
            .enumerate()
            .for_each(|(gch, chunk)| {
                let (a, c) = (gch / self.nchan, gch % self.nchan);
                for j in 0..self.ntime {
                    for pol in 0..npol {
                        let (re, im) = self.sample(a, c, pol, t0 + j as u64);
                        let off = (j * npol + pol) * bpc;
                        encode_complex(
                            self.nbits,
                            re as f32,
                            im as f32,
                            &mut chunk[off..off + bpc],
                        );
                    }
                }
            });
        data
    }

    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Generate(m));
        if !matches!(self.nbits, 4 | 8 | 16) {
            return bad(format!("NBITS {} (4, 8 or 16)", self.nbits));
        }
        if !matches!(self.npol, 1 | 2 | 4) {
            return bad(format!("NPOL {} (1, 2 or 4)", self.npol));
        }
        if self.nchan == 0 || self.nants == 0 || self.ntime == 0 {
            return bad("channels, antennas and samples per block must be at least 1".into());
        }
        if self.overlap >= self.ntime {
            return bad(format!(
                "overlap {} must be less than the {} samples per block",
                self.overlap, self.ntime
            ));
        }
        if self.files == 0 || self.blocks_per_file == 0 {
            return bad("at least one file of one block".into());
        }
        if self.obsbw == 0.0 {
            return bad("bandwidth must not be 0".into());
        }
        if self.try_blocsize().is_none() {
            return bad(format!(
                "BLOCSIZE = {} antennas × {} channels × {} samples × {} pol × {} bytes does not fit a 64-bit integer",
                self.nants,
                self.nchan,
                self.ntime,
                self.complex_pols(),
                2 * self.nbits / 8
            ));
        }
        for (key, v) in [
            ("SRC_NAME", &self.src_name),
            ("RA_STR", &self.ra_str),
            ("DEC_STR", &self.dec_str),
            ("TELESCOP", &self.telescop),
        ] {
            // As written: each quote doubled.
            let len = v.chars().count() + v.matches('\'').count();
            if len > MAX_STRING_CHARS {
                return bad(format!(
                    "{key} {v:?} is {len} characters as written (quotes count twice); a header card holds at most {MAX_STRING_CHARS}"
                ));
            }
        }
        Ok(())
    }
}

/// Writes the scan described by `spec`.
pub fn generate(spec: &GenerateSpec) -> Result<GenerateReport> {
    spec.check()?;
    std::fs::create_dir_all(&spec.dir).map_err(|e| Error::OutputDir {
        path: spec.dir.clone(),
        source: e,
    })?;
    let mut files = Vec::new();
    let mut written = 0;
    let mut dropped = 0;
    let pad = |n: usize| pad_directio(n as u64, spec.directio) as usize;
    for fi in 0..spec.files {
        let path = spec.dir.join(format!("{}.{fi:04}.raw", spec.stem));
        let file = File::create(&path).map_err(|e| Error::io(&path, e))?;
        let mut w = BufWriter::new(file);
        for bi in 0..spec.blocks_per_file {
            let n = fi * spec.blocks_per_file + bi;
            if spec.drop_blocks.contains(&n) {
                dropped += 1;
                continue;
            }
            let mut data = spec.block_data(n);
            data.resize(pad(data.len()), 0);
            w.write_all(&spec.header(n).to_bytes(spec.directio))
                .and_then(|_| w.write_all(&data))
                .map_err(|e| Error::io(&path, e))?;
            written += 1;
        }
        w.flush().map_err(|e| Error::io(&path, e))?;
        files.push(path);
    }
    if spec.truncate_bytes > 0 {
        let last = files.last().expect("at least one file");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(last)
            .map_err(|e| Error::io(last, e))?;
        let len = f.metadata().map_err(|e| Error::io(last, e))?.len();
        f.set_len(len.saturating_sub(spec.truncate_bytes))
            .map_err(|e| Error::io(last, e))?;
    }
    Ok(GenerateReport {
        files,
        blocks_written: written,
        blocks_dropped: dropped,
    })
}
