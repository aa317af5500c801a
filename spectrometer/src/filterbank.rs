//! SIGPROC filterbank files: the header (written and read back) and float32 data.
//!
//! The header is a sequence of keywords, each an `i32` length (little-endian) and the ASCII
//! name, followed by the value: `i32` or `f64` little-endian, or a string as `i32` length and
//! bytes. It opens with `HEADER_START` and closes with `HEADER_END` (no values). The keywords
//! written, in order: `telescope_id` (i32), `machine_id` (i32), `data_type` (i32, 1 =
//! filterbank), `rawdatafile` (str), `source_name` (str), `src_raj` (f64, hhmmss.s), `src_dej`
//! (f64, ddmmss.s), `tstart` (f64, MJD), `tsamp` (f64, s), `fch1` (f64, MHz), `foff` (f64,
//! MHz), `nchans` (i32), `nifs` (i32), `nbits` (i32, 32), `ibeam` (i32), `nbeams` (i32). The data
//! follow: little-endian `f32` in (time, IF, channel) order.

use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// The values of a filterbank header this program writes.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterbankHeader {
    /// Telescope (SIGPROC numbering; see [`telescope_id`]).
    pub telescope_id: i32,
    /// Backend (SIGPROC numbering).
    pub machine_id: i32,
    /// 1: filterbank.
    pub data_type: i32,
    /// Name of the first RAW file.
    pub rawdatafile: String,
    /// Source name.
    pub source_name: String,
    /// Right ascension, packed `hhmmss.s`.
    pub src_raj: f64,
    /// Declination, packed `±ddmmss.s`.
    pub src_dej: f64,
    /// MJD of the first sample.
    pub tstart: f64,
    /// Sample interval, s.
    pub tsamp: f64,
    /// Centre frequency of channel 0, MHz.
    pub fch1: f64,
    /// Channel spacing, MHz (negative: frequency decreases with channel index).
    pub foff: f64,
    /// Channels.
    pub nchans: i32,
    /// IFs (polarisation products).
    pub nifs: i32,
    /// Bits per value (32: float).
    pub nbits: i32,
    /// Beam (antenna) number of this file.
    pub ibeam: i32,
    /// Beams (antennas) in the set of files.
    pub nbeams: i32,
}

/// The longest string value (and keyword) [`FilterbankHeader::parse`] accepts, in bytes;
/// [`FilterbankHeader::to_bytes`] cuts longer strings to it.
pub const MAX_STRING_LEN: usize = 4096;

/// A length prefix: `bytes.len()` as a little-endian `i32` (callers keep it within
/// [`MAX_STRING_LEN`], so the conversion is exact).
fn put_len(out: &mut Vec<u8>, bytes: &[u8]) {
    debug_assert!(bytes.len() <= MAX_STRING_LEN);
    let n = i32::try_from(bytes.len()).unwrap_or(i32::MAX);
    out.extend_from_slice(&n.to_le_bytes());
}

fn put_key(out: &mut Vec<u8>, key: &str) {
    put_len(out, key.as_bytes());
    out.extend_from_slice(key.as_bytes());
}

fn put_i32(out: &mut Vec<u8>, key: &str, v: i32) {
    put_key(out, key);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_f64(out: &mut Vec<u8>, key: &str, v: f64) {
    put_key(out, key);
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, key: &str, v: &str) {
    put_key(out, key);
    // Readers decode strings as ASCII: replace anything else; and they refuse (this one) or
    // misread (a negative i32) longer strings than MAX_STRING_LEN: cut them.
    let ascii: String = v
        .chars()
        .map(|c| if c.is_ascii() { c } else { '?' })
        .take(MAX_STRING_LEN)
        .collect();
    put_len(out, ascii.as_bytes());
    out.extend_from_slice(ascii.as_bytes());
}

impl FilterbankHeader {
    /// The serialised header, `HEADER_START` to `HEADER_END`. Non-ASCII characters of strings
    /// are written as `?`, and strings are cut to [`MAX_STRING_LEN`] bytes (what readers accept).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut o = Vec::with_capacity(512);
        put_key(&mut o, "HEADER_START");
        put_i32(&mut o, "telescope_id", self.telescope_id);
        put_i32(&mut o, "machine_id", self.machine_id);
        put_i32(&mut o, "data_type", self.data_type);
        put_str(&mut o, "rawdatafile", &self.rawdatafile);
        put_str(&mut o, "source_name", &self.source_name);
        put_f64(&mut o, "src_raj", self.src_raj);
        put_f64(&mut o, "src_dej", self.src_dej);
        put_f64(&mut o, "tstart", self.tstart);
        put_f64(&mut o, "tsamp", self.tsamp);
        put_f64(&mut o, "fch1", self.fch1);
        put_f64(&mut o, "foff", self.foff);
        put_i32(&mut o, "nchans", self.nchans);
        put_i32(&mut o, "nifs", self.nifs);
        put_i32(&mut o, "nbits", self.nbits);
        put_i32(&mut o, "ibeam", self.ibeam);
        put_i32(&mut o, "nbeams", self.nbeams);
        put_key(&mut o, "HEADER_END");
        o
    }

    /// Parses a header from the start of `bytes`; returns it and its length in bytes.
    ///
    /// Accepts the keywords blimpy knows (unknown ones are an error, since their type and so
    /// their length cannot be known); keywords not in [`FilterbankHeader`] are skipped.
    pub fn parse(bytes: &[u8]) -> std::result::Result<(FilterbankHeader, usize), String> {
        let mut pos = 0usize;
        let take = |pos: &mut usize, n: usize| -> std::result::Result<&[u8], String> {
            let s = bytes
                .get(*pos..*pos + n)
                .ok_or_else(|| format!("{ENDS_EARLY} at byte {pos}"))?;
            *pos += n;
            Ok(s)
        };
        let read_i32 = |pos: &mut usize| -> std::result::Result<i32, String> {
            Ok(i32::from_le_bytes(
                take(pos, 4)?.try_into().expect("4 bytes"),
            ))
        };
        let read_f64 = |pos: &mut usize| -> std::result::Result<f64, String> {
            Ok(f64::from_le_bytes(
                take(pos, 8)?.try_into().expect("8 bytes"),
            ))
        };
        let read_string = |pos: &mut usize| -> std::result::Result<String, String> {
            let n = read_i32(pos)?;
            if !(0..=MAX_STRING_LEN as i32).contains(&n) {
                return Err(format!("string length {n} at byte {}", *pos - 4));
            }
            Ok(String::from_utf8_lossy(take(pos, n as usize)?).into_owned())
        };
        if read_string(&mut pos)? != "HEADER_START" {
            return Err("does not start with HEADER_START".into());
        }
        let mut h = FilterbankHeader {
            telescope_id: 0,
            machine_id: 0,
            data_type: 0,
            rawdatafile: String::new(),
            source_name: String::new(),
            src_raj: 0.0,
            src_dej: 0.0,
            tstart: 0.0,
            tsamp: 0.0,
            fch1: 0.0,
            foff: 0.0,
            nchans: 0,
            nifs: 0,
            nbits: 0,
            ibeam: 0,
            nbeams: 0,
        };
        let mut seen = Vec::new();
        loop {
            let key = read_string(&mut pos)?;
            match key.as_str() {
                "HEADER_END" => break,
                "telescope_id" => h.telescope_id = read_i32(&mut pos)?,
                "machine_id" => h.machine_id = read_i32(&mut pos)?,
                "data_type" => h.data_type = read_i32(&mut pos)?,
                "nchans" => h.nchans = read_i32(&mut pos)?,
                "nifs" => h.nifs = read_i32(&mut pos)?,
                "nbits" => h.nbits = read_i32(&mut pos)?,
                "ibeam" => h.ibeam = read_i32(&mut pos)?,
                "nbeams" => h.nbeams = read_i32(&mut pos)?,
                "barycentric" | "pulsarcentric" | "nsamples" => {
                    read_i32(&mut pos)?;
                }
                "rawdatafile" => h.rawdatafile = read_string(&mut pos)?,
                "source_name" => h.source_name = read_string(&mut pos)?,
                "src_raj" => h.src_raj = read_f64(&mut pos)?,
                "src_dej" => h.src_dej = read_f64(&mut pos)?,
                "tstart" => h.tstart = read_f64(&mut pos)?,
                "tsamp" => h.tsamp = read_f64(&mut pos)?,
                "fch1" => h.fch1 = read_f64(&mut pos)?,
                "foff" => h.foff = read_f64(&mut pos)?,
                "az_start" | "za_start" | "refdm" | "period" => {
                    read_f64(&mut pos)?;
                }
                other => return Err(format!("unknown keyword {other:?}")),
            }
            seen.push(key);
        }
        for need in ["nchans", "nifs", "nbits", "tsamp", "fch1", "foff"] {
            if !seen.iter().any(|k| k == need) {
                return Err(format!("keyword {need} missing"));
            }
        }
        Ok((h, pos))
    }
}

/// A whole filterbank file in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct Filterbank {
    /// The header.
    pub header: FilterbankHeader,
    /// All values, (time, IF, channel) order.
    pub data: Vec<f32>,
}

impl Filterbank {
    /// Time samples (spectra) in the file.
    pub fn nsamples(&self) -> usize {
        // In usize: the product of two i32 counts can overflow an i32.
        let per = self.header.nifs.max(1) as usize * self.header.nchans.max(1) as usize;
        self.data.len() / per
    }

    /// Value at time `t`, IF `ifx`, channel `ch`.
    pub fn at(&self, t: usize, ifx: usize, ch: usize) -> f32 {
        let (nifs, nchans) = (self.header.nifs as usize, self.header.nchans as usize);
        self.data[(t * nifs + ifx) * nchans + ch]
    }

    /// Reads a 32-bit float filterbank file.
    pub fn read(path: &Path) -> Result<Filterbank> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let bad = |reason: String| Error::Filterbank {
            path: path.to_path_buf(),
            reason,
        };
        let (header, len) = FilterbankHeader::parse(&bytes).map_err(bad)?;
        if header.nbits != 32 {
            return Err(bad(format!("nbits {} (only 32 is read)", header.nbits)));
        }
        let body = &bytes[len..];
        let per = 4 * (header.nifs.max(0) as usize) * (header.nchans.max(0) as usize);
        if per == 0 || body.len() % per != 0 {
            return Err(bad(format!(
                "{} data bytes are not a whole number of {}-byte spectra",
                body.len(),
                per
            )));
        }
        let data = body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        Ok(Filterbank { header, data })
    }
}

/// The bytes [`read_header`] reads first (SIGPROC headers are a few hundred bytes); it reads
/// on (four times as many each time) only where the header goes on past them.
const HEADER_READ_FIRST: u64 = 64 * 1024;

/// The error [`FilterbankHeader::parse`] gives for a header cut short.
const ENDS_EARLY: &str = "header ends early";

/// Reads only the header of the filterbank file at `path` and counts its spectra from the file's
/// size, without reading the data (a product file may be many gigabytes). Any `nbits` SIGPROC
/// allows (1, 2, 4, 8, 16 or 32) is accepted; the data must be a whole number of spectra.
pub fn read_header(path: &Path) -> Result<(FilterbankHeader, u64)> {
    read_header_from(path, HEADER_READ_FIRST)
}

/// [`read_header`], reading `first` bytes first.
fn read_header_from(path: &Path, first: u64) -> Result<(FilterbankHeader, u64)> {
    use std::io::Read;
    let bad = |reason: String| Error::Filterbank {
        path: path.to_path_buf(),
        reason,
    };
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let len = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let mut bytes = Vec::new();
    let mut want = first.max(1);
    let (header, hlen) = loop {
        (&mut file)
            .take(want - bytes.len() as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(path, e))?;
        // Short of `want`: the end of the file (however its size changed since `len`).
        let more = bytes.len() as u64 == want;
        match FilterbankHeader::parse(&bytes) {
            Err(e) if e.starts_with(ENDS_EARLY) && more => want = want.saturating_mul(4),
            parsed => break parsed.map_err(bad)?,
        }
    };
    if ![1, 2, 4, 8, 16, 32].contains(&header.nbits) {
        return Err(bad(format!(
            "nbits {} (SIGPROC allows 1, 2, 4, 8, 16 and 32)",
            header.nbits
        )));
    }
    let per_bits = [header.nifs, header.nchans, header.nbits]
        .iter()
        .try_fold(1u64, |acc, &v| acc.checked_mul(u64::try_from(v).ok()?))
        .filter(|&b| b > 0 && b.is_multiple_of(8))
        .ok_or_else(|| {
            bad(format!(
                "nifs {} × nchans {} × nbits {} is not a positive whole number of bytes per spectrum",
                header.nifs, header.nchans, header.nbits
            ))
        })?;
    let per = per_bits / 8;
    let body = len.saturating_sub(hlen as u64);
    if !body.is_multiple_of(per) {
        return Err(bad(format!(
            "{body} data bytes are not a whole number of {per}-byte spectra"
        )));
    }
    Ok((header, body / per))
}

/// Writes `values` as little-endian `f32`.
pub fn write_f32s(w: &mut impl Write, values: &[f32]) -> std::io::Result<()> {
    if cfg!(target_endian = "little") {
        // The values' own bytes: no copy, no allocation per spectrum.
        return w.write_all(bytemuck::cast_slice(values));
    }
    let mut buf = Vec::with_capacity(values.len() * 4);
    for v in values {
        buf.extend_from_slice(&v.to_le_bytes());
    }
    w.write_all(&buf)
}

/// Packs `hh:mm:ss.s` (or `±dd:mm:ss.s`) into SIGPROC's `hhmmss.s` (`±ddmmss.s`) number;
/// `None` when it does not parse.
pub fn pack_sexagesimal(s: &str) -> Option<f64> {
    let s = s.trim();
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let parts: Vec<&str> = body.split([':', ' ']).filter(|p| !p.is_empty()).collect();
    if parts.is_empty() || parts.len() > 3 {
        return None;
    }
    let d: f64 = parts[0].parse().ok()?;
    let m: f64 = parts.get(1).map_or(Some(0.0), |p| p.parse().ok())?;
    let sec: f64 = parts.get(2).map_or(Some(0.0), |p| p.parse().ok())?;
    if d < 0.0 || !(0.0..60.0).contains(&m) || !(0.0..60.0).contains(&sec) {
        return None;
    }
    let v = d * 10000.0 + m * 100.0 + sec;
    Some(if neg { -v } else { v })
}

/// SIGPROC's `telescope_id` for a `TELESCOP` value (0, "fake", when unknown).
pub fn telescope_id(telescop: &str) -> i32 {
    let t = telescop.trim().to_ascii_uppercase();
    match t.as_str() {
        "ARECIBO" | "AO" => 1,
        "OOTY" => 2,
        "NANCAY" => 3,
        "PARKES" | "PKS" => 4,
        "JODRELL" | "JODRELL BANK" | "LOVELL" => 5,
        "GBT" | "GB" | "GREEN BANK" => 6,
        "GMRT" => 7,
        "EFFELSBERG" => 8,
        "ATA" => 9,
        "MEERKAT" | "MKAT" => 64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sexagesimal() {
        assert_eq!(pack_sexagesimal("12:34:56.5"), Some(123456.5));
        assert_eq!(pack_sexagesimal("-05:06:07.25"), Some(-50607.25));
        assert_eq!(pack_sexagesimal("+00:30:00"), Some(3000.0));
        assert_eq!(pack_sexagesimal("garbage"), None);
        assert_eq!(pack_sexagesimal("12:61:00"), None);
    }

    /// A header of `nifs` IFs × `nchans` channels of `nbits` bits.
    fn header(nifs: i32, nchans: i32, nbits: i32) -> FilterbankHeader {
        FilterbankHeader {
            telescope_id: 0,
            machine_id: 0,
            data_type: 1,
            rawdatafile: String::new(),
            source_name: String::new(),
            src_raj: 0.0,
            src_dej: 0.0,
            tstart: 0.0,
            tsamp: 1.0,
            fch1: 1.0,
            foff: 1.0,
            nchans,
            nifs,
            nbits,
            ibeam: 0,
            nbeams: 1,
        }
    }

    #[test]
    fn many_ifs_and_channels_without_data() {
        // Found writing the `filterbank` fuzz target (fuzz/), which reaches it: a header of
        // 65,536 IFs × 65,536 channels and no data is read (0 bytes are a whole number of
        // spectra); counting its spectra multiplied the two as i32 and overflowed (then
        // divided by zero in release).
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.fil");
        std::fs::write(&path, header(1 << 16, 1 << 16, 32).to_bytes()).unwrap();
        let fb = Filterbank::read(&path).unwrap();
        assert_eq!(fb.nsamples(), 0);
        assert_eq!(read_header(&path).unwrap().1, 0);
    }

    #[test]
    fn read_header_counts_spectra_from_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.fil");
        let write = |h: &FilterbankHeader, data_bytes: usize| {
            let mut bytes = h.to_bytes();
            bytes.resize(bytes.len() + data_bytes, 7);
            std::fs::write(&path, bytes).unwrap();
        };
        // 32 bits, 2 IFs × 3 channels: 24 bytes a spectrum; the header as written.
        let h = header(2, 3, 32);
        write(&h, 5 * 24);
        assert_eq!(read_header(&path).unwrap(), (h.clone(), 5));
        assert_eq!(Filterbank::read(&path).unwrap().nsamples(), 5);
        // A partial spectrum at the end.
        write(&h, 5 * 24 + 1);
        let e = read_header(&path).unwrap_err().to_string();
        assert!(
            e.contains("121 data bytes are not a whole number of 24-byte spectra"),
            "{e}"
        );
        // 8 and 2 bits (Filterbank::read reads 32 only; the header reader counts any).
        write(&header(1, 16, 8), 3 * 16);
        assert_eq!(read_header(&path).unwrap().1, 3);
        write(&header(1, 16, 2), 7 * 4);
        assert_eq!(read_header(&path).unwrap().1, 7);
        // Bits that are no SIGPROC size, and spectra that are not whole bytes.
        write(&header(1, 16, 12), 0);
        let e = read_header(&path).unwrap_err().to_string();
        assert!(e.contains("nbits 12"), "{e}");
        write(&header(1, 3, 1), 0);
        let e = read_header(&path).unwrap_err().to_string();
        assert!(e.contains("not a positive whole number of bytes"), "{e}");
        write(&header(0, 3, 32), 0);
        assert!(read_header(&path).is_err());
        // A header longer than the first read is read on to its end (from 16 bytes: four
        // reads for this one), here with 2 spectra and a header of a few hundred bytes.
        write(&h, 2 * 24);
        assert!(h.to_bytes().len() > 256);
        assert_eq!(read_header_from(&path, 16).unwrap(), (h.clone(), 2));
        // A file that ends inside its header is an error however far it is read.
        let cut = &h.to_bytes()[..100];
        std::fs::write(&path, cut).unwrap();
        let e = read_header_from(&path, 16).unwrap_err().to_string();
        assert!(e.contains("header ends early at byte"), "{e}");
        // Not a filterbank file at all.
        std::fs::write(&path, b"BACKEND = 'GUPPI   '").unwrap();
        let e = read_header(&path).unwrap_err().to_string();
        assert!(e.contains("not a valid filterbank file"), "{e}");
    }
}
