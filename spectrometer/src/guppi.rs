//! GUPPI RAW blocks: header cards, the keys this program reads, the block geometry, and sample
//! decoding (and encoding, for the generator).
//!
//! A block is a header of 80-character cards (`KEY     = value`, strings in single quotes)
//! ending with an `END` card, then `BLOCSIZE` bytes of samples ordered
//! `[channel][time][pol][re, im]`. When `DIRECTIO` is non-zero the header and the data are each
//! padded with zero bytes to a multiple of 512 bytes.

use std::io::Read;
use std::path::{Path, PathBuf};

use num_complex::Complex32;

use crate::error::{Error, Result};

/// Length of a header card.
pub const CARD_LEN: usize = 80;
/// Alignment of header and data when `DIRECTIO` is set.
pub const DIRECTIO_ALIGN: u64 = 512;
/// A header without `END` within this many cards is rejected ([`Error::NoEndCard`]).
pub const MAX_CARDS: usize = 16384;
/// The longest string value a card holds, in characters as written (a quote counts twice):
/// `KEY     = '` takes 11 characters and the closing quote one. [`Header::to_bytes`] cuts longer
/// strings to this length, keeping the closing quote.
pub const MAX_STRING_CHARS: usize = CARD_LEN - 12;

/// Rounds `n` up to a multiple of [`DIRECTIO_ALIGN`] when `directio` is set.
pub fn pad_directio(n: u64, directio: bool) -> u64 {
    if directio {
        n.div_ceil(DIRECTIO_ALIGN) * DIRECTIO_ALIGN
    } else {
        n
    }
}

/// Where a header came from, for error messages.
#[derive(Debug, Clone)]
pub struct Loc {
    /// The RAW file.
    pub file: PathBuf,
    /// Block index in that file.
    pub block: usize,
}

impl Loc {
    /// A location.
    pub fn new(file: &Path, block: usize) -> Self {
        Loc {
            file: file.to_path_buf(),
            block,
        }
    }
}

/// One card's value as written.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A quoted string (quotes removed, `''` unescaped, trailing blanks removed).
    Str(String),
    /// Anything else (a number or a logical), trimmed, comment removed.
    Raw(String),
    /// No value: a FITS blank card (`KEY     =`, or `KEY     =   / comment`). Reading a blank
    /// key as a number is an [`Error::BlankValue`]; as a string it is absent.
    Blank,
}

impl Value {
    /// The text of the value (string contents, or the raw token).
    pub fn text(&self) -> &str {
        match self {
            Value::Str(s) | Value::Raw(s) => s,
            Value::Blank => "",
        }
    }
}

/// A parsed header: the cards in order, unknown keys included.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    /// `(key, value)` in card order.
    pub cards: Vec<(String, Value)>,
}

impl Header {
    /// The value of the first card with `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.cards.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` (replacing its first card or appending one).
    pub fn set(&mut self, key: &str, value: Value) {
        match self.cards.iter_mut().find(|(k, _)| k == key) {
            Some(card) => card.1 = value,
            None => self.cards.push((key.to_string(), value)),
        }
    }

    /// Sets an integer card.
    pub fn set_int(&mut self, key: &str, v: i64) {
        self.set(key, Value::Raw(v.to_string()));
    }

    /// Sets a floating-point card (always written with a decimal point or exponent).
    pub fn set_float(&mut self, key: &str, v: f64) {
        let mut s = format!("{v:?}");
        if !s.contains(['.', 'e', 'E']) {
            s.push_str(".0");
        }
        self.set(key, Value::Raw(s));
    }

    /// Sets a string card.
    pub fn set_str(&mut self, key: &str, v: &str) {
        self.set(key, Value::Str(v.to_string()));
    }

    /// A required integer.
    pub fn int(&self, key: &str, loc: &Loc) -> Result<i64> {
        self.opt_int(key, loc)?.ok_or_else(|| missing(key, loc))
    }

    /// An optional integer (a value like `8192.0` is accepted when it is whole); a blank value
    /// is an [`Error::BlankValue`].
    pub fn opt_int(&self, key: &str, loc: &Loc) -> Result<Option<i64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let t = not_blank(v, key, loc)?.trim();
        if let Ok(i) = t.parse::<i64>() {
            return Ok(Some(i));
        }
        match t.parse::<f64>() {
            Ok(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Some(f as i64)),
            _ => Err(bad(key, t, "an integer", loc)),
        }
    }

    /// A required float.
    pub fn float(&self, key: &str, loc: &Loc) -> Result<f64> {
        self.opt_float(key, loc)?.ok_or_else(|| missing(key, loc))
    }

    /// An optional float (FORTRAN `D` exponents accepted); a blank value is an
    /// [`Error::BlankValue`].
    pub fn opt_float(&self, key: &str, loc: &Loc) -> Result<Option<f64>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let t = not_blank(v, key, loc)?.trim();
        match t.replace(['D', 'd'], "E").parse::<f64>() {
            Ok(f) if f.is_finite() => Ok(Some(f)),
            _ => Err(bad(key, t, "a finite number", loc)),
        }
    }

    /// An optional string (an unquoted value is taken as it is; a blank value is absent).
    pub fn opt_str(&self, key: &str) -> Option<String> {
        match self.get(key) {
            None | Some(Value::Blank) => None,
            Some(v) => Some(v.text().trim().to_string()),
        }
    }

    /// The header as bytes: the cards, `END`, and zero padding to 512 bytes when `directio`.
    ///
    /// Cards are ASCII: any other character is written as `?`. A string longer than
    /// [`MAX_STRING_CHARS`] (quotes counting twice) is cut to that length, so the card keeps its
    /// closing quote and reads back as the string's beginning.
    pub fn to_bytes(&self, directio: bool) -> Vec<u8> {
        let mut out = Vec::with_capacity((self.cards.len() + 1) * CARD_LEN);
        for (k, v) in &self.cards {
            let mut card: String = match v {
                Value::Str(s) => format!("{k:<8}= '{:<8}'", quoted_body(s)),
                Value::Raw(s) => format!("{k:<8}= {s:>20}"),
                Value::Blank => format!("{k:<8}="),
            }
            .chars()
            .map(card_char)
            .collect();
            card.truncate(CARD_LEN);
            out.extend_from_slice(format!("{card:<80}").as_bytes());
        }
        out.extend_from_slice(format!("{:<80}", "END").as_bytes());
        let padded = pad_directio(out.len() as u64, directio) as usize;
        out.resize(padded, 0);
        out
    }
}

/// `c` as a header card holds it: printable ASCII, anything else `?`.
fn card_char(c: char) -> char {
    if c.is_ascii() && !c.is_ascii_control() {
        c
    } else {
        '?'
    }
}

/// A string's text between its quotes: ASCII, quotes doubled, at most [`MAX_STRING_CHARS`]
/// characters (never half of a doubled quote).
fn quoted_body(s: &str) -> String {
    let mut body = String::new();
    for c in s.chars().map(card_char) {
        let piece: &[char] = if c == '\'' { &['\'', '\''] } else { &[c] };
        if body.len() + piece.len() > MAX_STRING_CHARS {
            break;
        }
        body.extend(piece);
    }
    body
}

/// The text of `v`, or [`Error::BlankValue`] for a blank card.
fn not_blank<'a>(v: &'a Value, key: &str, loc: &Loc) -> Result<&'a str> {
    match v {
        Value::Blank => Err(Error::BlankValue {
            file: loc.file.clone(),
            block: loc.block,
            key: key.to_string(),
        }),
        v => Ok(v.text()),
    }
}

fn missing(key: &str, loc: &Loc) -> Error {
    Error::MissingKey {
        file: loc.file.clone(),
        block: loc.block,
        key: key.to_string(),
    }
}

fn bad(key: &str, value: &str, expected: &str, loc: &Loc) -> Error {
    Error::BadValue {
        file: loc.file.clone(),
        block: loc.block,
        key: key.to_string(),
        value: value.to_string(),
        expected: expected.to_string(),
    }
}

/// Parses one card. `Ok(None)` is the `END` card; comment and blank cards give an empty key.
fn parse_card(card: &[u8], index: usize, loc: &Loc) -> Result<Option<(String, Option<Value>)>> {
    let text = String::from_utf8_lossy(card);
    let malformed = || Error::MalformedCard {
        file: loc.file.clone(),
        block: loc.block,
        card: index,
        key: text
            .chars()
            .take(8)
            .collect::<String>()
            .trim_end()
            .to_string(),
        text: text.trim_end().to_string(),
    };
    if !card.iter().all(|&b| (0x20..0x7f).contains(&b)) {
        return Err(malformed());
    }
    let keyfield = text[..8].trim_end();
    if keyfield == "END" && text[8..].trim().is_empty() {
        return Ok(None);
    }
    if keyfield.is_empty() || keyfield == "COMMENT" || keyfield == "HISTORY" {
        return Ok(Some((String::new(), None)));
    }
    let Some(eq) = text.find('=') else {
        return Err(malformed());
    };
    let key = text[..eq].trim();
    if key.is_empty() || key.len() > 8 || key.contains(' ') {
        return Err(malformed());
    }
    let rest = text[eq + 1..].trim_start();
    let value = if let Some(body) = rest.strip_prefix('\'') {
        // A quoted string: '' is an escaped quote; the string ends at the first lone quote.
        let mut s = String::new();
        let mut chars = body.chars().peekable();
        let mut closed = false;
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    s.push('\'');
                } else {
                    closed = true;
                    break;
                }
            } else {
                s.push(c);
            }
        }
        if !closed {
            return Err(malformed());
        }
        Value::Str(s.trim_end().to_string())
    } else {
        let token = rest.split('/').next().unwrap_or("").trim();
        if token.is_empty() {
            // A FITS blank (undefined) value: fine unless the key is read.
            Value::Blank
        } else {
            Value::Raw(token.to_string())
        }
    };
    Ok(Some((key.to_string(), Some(value))))
}

/// How reading a header ended.
#[derive(Debug)]
pub enum HeaderRead {
    /// A whole header; `len` is its size on disk including DIRECTIO padding.
    Complete {
        /// The parsed header.
        header: Header,
        /// Bytes from the first card to the first data byte.
        len: u64,
    },
    /// The stream ended before any byte of this header (a clean end of file).
    Eof,
    /// The stream ended inside the header.
    Truncated {
        /// Whole cards read.
        cards: usize,
        /// The last keyword read.
        last_key: String,
    },
}

/// Reads one header from `r` (positioned at its first card).
pub fn read_header(r: &mut impl Read, loc: &Loc) -> Result<HeaderRead> {
    let mut header = Header::default();
    let mut card = [0u8; CARD_LEN];
    let mut last_key = String::new();
    for index in 0..MAX_CARDS {
        let got = read_full(r, &mut card).map_err(|e| Error::io(&loc.file, e))?;
        if got == 0 && index == 0 {
            return Ok(HeaderRead::Eof);
        }
        if got < CARD_LEN {
            return Ok(HeaderRead::Truncated {
                cards: index,
                last_key,
            });
        }
        match parse_card(&card, index, loc)? {
            None => {
                let raw = ((index + 1) * CARD_LEN) as u64;
                let directio = header.opt_int("DIRECTIO", loc)?.is_some_and(|d| d != 0);
                return Ok(HeaderRead::Complete {
                    header,
                    len: pad_directio(raw, directio),
                });
            }
            Some((key, Some(value))) => {
                last_key.clone_from(&key);
                header.cards.push((key, value));
            }
            Some((_, None)) => {}
        }
    }
    Err(Error::NoEndCard {
        file: loc.file.clone(),
        block: loc.block,
        cards: MAX_CARDS,
    })
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
pub fn read_full(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// The shape of every block of a scan, from `BLOCSIZE`, `OBSNCHAN`, `NPOL`, `NBITS`, `NANTS`
/// and `OVERLAP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// `BLOCSIZE`: data bytes per block.
    pub blocsize: usize,
    /// `OBSNCHAN`: coarse channels in a block, all antennas (antenna-major).
    pub obsnchan: usize,
    /// `NANTS` (1 when absent).
    pub nants: usize,
    /// Coarse channels per antenna, `OBSNCHAN / NANTS`.
    pub nchan_per_ant: usize,
    /// Complex polarisations per sample: 1 for `NPOL = 1`, 2 for `NPOL = 2` or `4`.
    pub npol: usize,
    /// `NBITS`: 4, 8 or 16 bits per real or imaginary part.
    pub nbits: usize,
    /// Time samples per channel in a block.
    pub ntime: usize,
    /// `OVERLAP`: the last `overlap` samples of a block repeat at the start of the next.
    pub overlap: usize,
    /// `DIRECTIO` non-zero: header and data padded to 512 bytes.
    pub directio: bool,
}

impl Geometry {
    /// Bytes per complex value (one pol, one time, one channel): `2 × NBITS / 8`.
    pub fn bytes_per_complex(&self) -> usize {
        2 * self.nbits / 8
    }

    /// Bytes per time step of one channel (all pols).
    pub fn bytes_per_time(&self) -> usize {
        self.npol * self.bytes_per_complex()
    }

    /// Bytes of one channel in a block.
    pub fn bytes_per_chan(&self) -> usize {
        self.ntime * self.bytes_per_time()
    }

    /// New samples a block contributes to the time axis: `ntime − OVERLAP`.
    pub fn new_samples(&self) -> usize {
        self.ntime - self.overlap
    }

    /// Data bytes on disk per block (BLOCSIZE, padded when DIRECTIO).
    pub fn data_len_on_disk(&self) -> u64 {
        pad_directio(self.blocsize as u64, self.directio)
    }

    /// Reads and checks the geometry keys of a header.
    pub fn from_header(h: &Header, loc: &Loc) -> Result<Geometry> {
        let blocsize = h.int("BLOCSIZE", loc)?;
        let obsnchan = h.int("OBSNCHAN", loc)?;
        let npol_raw = h.int("NPOL", loc)?;
        let nbits = h.int("NBITS", loc)?;
        let nants = h.opt_int("NANTS", loc)?.unwrap_or(1);
        let overlap = h.opt_int("OVERLAP", loc)?.unwrap_or(0);
        let directio = h.opt_int("DIRECTIO", loc)?.unwrap_or(0) != 0;
        let text = |k: &str| h.get(k).map(|v| v.text().to_string()).unwrap_or_default();
        if blocsize <= 0 {
            return Err(bad(
                "BLOCSIZE",
                &text("BLOCSIZE"),
                "a positive integer",
                loc,
            ));
        }
        if obsnchan <= 0 {
            return Err(bad(
                "OBSNCHAN",
                &text("OBSNCHAN"),
                "a positive integer",
                loc,
            ));
        }
        let npol = match npol_raw {
            1 => 1,
            2 | 4 => 2,
            _ => return Err(bad("NPOL", &text("NPOL"), "1, 2 or 4", loc)),
        };
        if !matches!(nbits, 4 | 8 | 16) {
            return Err(Error::UnsupportedNbits {
                file: loc.file.clone(),
                block: loc.block,
                nbits,
            });
        }
        if nants <= 0 || obsnchan % nants != 0 {
            return Err(bad(
                "NANTS",
                &text("NANTS"),
                &format!("a positive divisor of OBSNCHAN ({obsnchan})"),
                loc,
            ));
        }
        let (blocsize, obsnchan, nbits) = (blocsize as usize, obsnchan as usize, nbits as usize);
        // 2 × NBITS / 8 is a whole number of bytes (4, 8 or 16 bits); an absurd OBSNCHAN must
        // not wrap the product (to 0 in release builds, and then divide by it).
        let Some(per_time_all_chans) = obsnchan.checked_mul(npol * 2 * nbits / 8) else {
            return Err(bad(
                "OBSNCHAN",
                &text("OBSNCHAN"),
                &format!(
                    "a channel count whose bytes per time sample (OBSNCHAN × {npol} pol × 2 × {nbits} bits / 8) fit in 64 bits"
                ),
                loc,
            ));
        };
        if blocsize % per_time_all_chans != 0 {
            return Err(Error::BlocsizeMismatch {
                file: loc.file.clone(),
                block: loc.block,
                blocsize: blocsize as u64,
                obsnchan: obsnchan as u64,
                npol: npol as u64,
                nbits: nbits as u64,
            });
        }
        let ntime = blocsize / per_time_all_chans;
        if overlap < 0 || overlap as usize >= ntime {
            return Err(bad(
                "OVERLAP",
                &text("OVERLAP"),
                &format!("0 ≤ OVERLAP < the {ntime} samples per block"),
                loc,
            ));
        }
        Ok(Geometry {
            blocsize,
            obsnchan,
            nants: nants as usize,
            nchan_per_ant: obsnchan / nants as usize,
            npol,
            nbits,
            ntime,
            overlap: overlap as usize,
            directio,
        })
    }

    /// Decodes samples `t0 .. t0 + out.len()` of channel `chan` (0..OBSNCHAN, antenna-major) and
    /// polarisation `pol` from a block's data bytes into `out`.
    ///
    /// 8-bit and 16-bit parts are two's-complement signed integers (16-bit little-endian); a 4-bit
    /// complex value is one byte, real part in the high nibble and imaginary in the low nibble,
    /// each two's complement (−8..7).
    pub fn decode(&self, block: &[u8], chan: usize, pol: usize, t0: usize, out: &mut [Complex32]) {
        let stride = self.bytes_per_time();
        let bpc = self.bytes_per_complex();
        let base = chan * self.bytes_per_chan() + t0 * stride + pol * bpc;
        let n = out.len();
        if n == 0 {
            return;
        }
        let src = &block[base..base + (n - 1) * stride + bpc];
        match self.nbits {
            8 => {
                for (o, s) in out.iter_mut().zip(src.chunks(stride)) {
                    *o = Complex32::new(s[0] as i8 as f32, s[1] as i8 as f32);
                }
            }
            16 => {
                for (o, s) in out.iter_mut().zip(src.chunks(stride)) {
                    let re = i16::from_le_bytes([s[0], s[1]]);
                    let im = i16::from_le_bytes([s[2], s[3]]);
                    *o = Complex32::new(re as f32, im as f32);
                }
            }
            4 => {
                for (o, s) in out.iter_mut().zip(src.chunks(stride)) {
                    let (re, im) = unpack4(s[0]);
                    *o = Complex32::new(re as f32, im as f32);
                }
            }
            _ => unreachable!("NBITS checked in Geometry::from_header"),
        }
    }
}

/// Splits a 4-bit complex byte into (real, imaginary): high nibble real, low nibble imaginary,
/// two's complement.
pub fn unpack4(b: u8) -> (i8, i8) {
    ((b as i8) >> 4, ((b << 4) as i8) >> 4)
}

/// Packs (real, imaginary) in −8..7 into a 4-bit complex byte (inverse of [`unpack4`]).
pub fn pack4(re: i8, im: i8) -> u8 {
    ((re as u8) << 4) | ((im as u8) & 0x0f)
}

/// Writes one complex value at `nbits` into `out` (`2 × nbits / 8` bytes), rounding to the
/// nearest integer and clipping to the representable range.
pub fn encode_complex(nbits: usize, re: f32, im: f32, out: &mut [u8]) {
    let q = |x: f32, lo: f32, hi: f32| x.round().clamp(lo, hi);
    match nbits {
        4 => out[0] = pack4(q(re, -8.0, 7.0) as i8, q(im, -8.0, 7.0) as i8),
        8 => {
            out[0] = q(re, -128.0, 127.0) as i8 as u8;
            out[1] = q(im, -128.0, 127.0) as i8 as u8;
        }
        16 => {
            out[..2].copy_from_slice(&(q(re, -32768.0, 32767.0) as i16).to_le_bytes());
            out[2..4].copy_from_slice(&(q(im, -32768.0, 32767.0) as i16).to_le_bytes());
        }
        _ => panic!("unsupported NBITS {nbits}"),
    }
}

/// The scan metadata this program uses (from the first block's header).
#[derive(Debug, Clone, PartialEq)]
pub struct ObsInfo {
    /// `OBSFREQ`, MHz: centre of the band of one antenna's channels.
    pub obsfreq: f64,
    /// `OBSBW`, MHz: bandwidth of one antenna's channels; negative when channels run high to low.
    pub obsbw: f64,
    /// Signed coarse channel width, MHz: `OBSBW / (OBSNCHAN / NANTS)`.
    pub chan_bw: f64,
    /// `TBIN`, s: sample interval.
    pub tbin: f64,
    /// `STT_IMJD` (0 when absent).
    pub stt_imjd: i64,
    /// `STT_SMJD`, s (0 when absent).
    pub stt_smjd: f64,
    /// `STT_OFFS`, s (0 when absent).
    pub stt_offs: f64,
    /// `SRC_NAME` ("" when absent).
    pub src_name: String,
    /// `RA_STR`, `hh:mm:ss.s` (None when absent).
    pub ra_str: Option<String>,
    /// `DEC_STR`, `±dd:mm:ss.s` (None when absent).
    pub dec_str: Option<String>,
    /// `TELESCOP` ("" when absent).
    pub telescop: String,
}

impl ObsInfo {
    /// Reads the metadata keys; returns it and any warnings (absent optional keys, a `CHAN_BW`
    /// that disagrees with `OBSBW`).
    pub fn from_header(h: &Header, g: &Geometry, loc: &Loc) -> Result<(ObsInfo, Vec<String>)> {
        let mut warnings = Vec::new();
        let obsfreq = h.float("OBSFREQ", loc)?;
        let obsbw = h.float("OBSBW", loc)?;
        let tbin = h.float("TBIN", loc)?;
        if obsbw == 0.0 {
            return Err(bad("OBSBW", "0", "a non-zero bandwidth in MHz", loc));
        }
        if tbin <= 0.0 {
            return Err(bad(
                "TBIN",
                &tbin.to_string(),
                "a positive time in seconds",
                loc,
            ));
        }
        let chan_bw = obsbw / g.nchan_per_ant as f64;
        if let Some(cbw) = h.opt_float("CHAN_BW", loc)? {
            if (cbw - chan_bw).abs() > 1e-6 * chan_bw.abs() {
                warnings.push(format!(
                    "{}: CHAN_BW = {cbw} MHz disagrees with OBSBW / (OBSNCHAN / NANTS) = {chan_bw} MHz; using the latter",
                    loc.file.display()
                ));
            }
        }
        let stt_imjd = match h.opt_int("STT_IMJD", loc)? {
            Some(v) => v,
            None => {
                warnings.push("STT_IMJD absent: tstart counts from MJD 0".to_string());
                0
            }
        };
        let stt_smjd = h.opt_float("STT_SMJD", loc)?.unwrap_or(0.0);
        let stt_offs = h.opt_float("STT_OFFS", loc)?.unwrap_or(0.0);
        Ok((
            ObsInfo {
                obsfreq,
                obsbw,
                chan_bw,
                tbin,
                stt_imjd,
                stt_smjd,
                stt_offs,
                src_name: h.opt_str("SRC_NAME").unwrap_or_default(),
                ra_str: h.opt_str("RA_STR"),
                dec_str: h.opt_str("DEC_STR"),
                telescop: h.opt_str("TELESCOP").unwrap_or_default(),
            },
            warnings,
        ))
    }

    /// Centre frequency (MHz) of coarse channel `c` (0..OBSNCHAN/NANTS) of an antenna:
    /// `OBSFREQ − OBSBW/2 + (c + ½) × chan_bw`.
    pub fn coarse_centre(&self, c: usize) -> f64 {
        self.obsfreq - self.obsbw / 2.0 + (c as f64 + 0.5) * self.chan_bw
    }

    /// MJD of the scan's first sample: `STT_IMJD + (STT_SMJD + STT_OFFS) / 86400`.
    pub fn start_mjd(&self) -> f64 {
        self.stt_imjd as f64 + (self.stt_smjd + self.stt_offs) / 86400.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nibbles_round_trip() {
        for re in -8i8..=7 {
            for im in -8i8..=7 {
                assert_eq!(unpack4(pack4(re, im)), (re, im));
            }
        }
        assert_eq!(unpack4(0x7f), (7, -1));
        assert_eq!(unpack4(0x81), (-8, 1));
    }

    #[test]
    fn cards_parse() {
        let loc = Loc::new(Path::new("x.raw"), 0);
        let mut h = Header::default();
        h.set_str("SRC_NAME", "it's");
        h.set_int("BLOCSIZE", 1024);
        h.set_float("OBSBW", -187.5);
        h.set_int("DIRECTIO", 1);
        let bytes = h.to_bytes(true);
        assert_eq!(bytes.len(), 512);
        let HeaderRead::Complete { header, len } = read_header(&mut &bytes[..], &loc).unwrap()
        else {
            panic!("incomplete")
        };
        assert_eq!(len, 512);
        assert_eq!(header.opt_str("SRC_NAME").unwrap(), "it's");
        assert_eq!(header.int("BLOCSIZE", &loc).unwrap(), 1024);
        assert_eq!(header.float("OBSBW", &loc).unwrap(), -187.5);
        let mut h2 = Header::default();
        h2.set_str("SRC_NAME", "Ω Cen");
        let b2 = h2.to_bytes(false);
        assert!(b2.is_ascii() && b2.len() == 160);
        assert!(matches!(
            header.int("NPOL", &loc),
            Err(Error::MissingKey { key, .. }) if key == "NPOL"
        ));
    }

    #[test]
    fn comment_and_value_comment() {
        let loc = Loc::new(Path::new("x.raw"), 3);
        let mut raw = String::new();
        raw.push_str(&format!("{:<80}", "NBITS   =                    8 / bits"));
        raw.push_str(&format!("{:<80}", "COMMENT anything at all"));
        raw.push_str(&format!("{:<80}", "END"));
        let HeaderRead::Complete { header, len } = read_header(&mut raw.as_bytes(), &loc).unwrap()
        else {
            panic!()
        };
        assert_eq!(len, 240);
        assert_eq!(header.int("NBITS", &loc).unwrap(), 8);
        assert_eq!(header.cards.len(), 1);
    }
}
