//! What the `header` command prints: a filterbank (`.fil`), FBH5 (`.h5`) or GUPPI RAW file,
//! told apart by its first bytes (not its name), reading headers only, however large the file.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::filterbank::{self, FilterbankHeader};
use crate::guppi::{self, Value};
use crate::scan::{Scan, SlotKind};

/// What a file holds, in lines to print.
#[derive(Debug, Clone, PartialEq)]
pub struct Description {
    /// `name value` lines (names padded to 12 columns), then, for a RAW file, its first
    /// block's cards.
    pub lines: Vec<String>,
    /// Warnings about the file (a RAW scan's gaps and truncations, as a run reports them).
    pub warnings: Vec<String>,
}

/// The kinds of file [`describe`] tells apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SIGPROC filterbank (anything that is neither of the others is read as one).
    Filterbank,
    /// HDF5, read as FBH5.
    Hdf5,
    /// GUPPI RAW.
    Raw,
}

/// The first bytes of every HDF5 file (FBH5 is HDF5) without a user block.
const HDF5_SIGNATURE: &[u8] = b"\x89HDF\r\n\x1a\n";

/// The kind of the file whose first bytes are `start`: HDF5 by its signature, GUPPI RAW when
/// they are a whole 80-byte card of printable ASCII whose keyword (8 columns) is followed by
/// `= ` as FITS writes a value card, else filterbank.
pub fn kind_of(start: &[u8]) -> Kind {
    if start.starts_with(HDF5_SIGNATURE) {
        return Kind::Hdf5;
    }
    let card = start.get(..guppi::CARD_LEN);
    let raw = card.is_some_and(|c| {
        c.iter().all(|b| (0x20..0x7f).contains(b))
            && c[..8]
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b" _-".contains(b))
            && &c[8..10] == b"= "
    });
    if raw {
        Kind::Raw
    } else {
        Kind::Filterbank
    }
}

/// Describes the file at `path` (see the module's documentation).
pub fn describe(path: &Path) -> Result<Description> {
    let mut start = [0u8; guppi::CARD_LEN];
    let n = std::fs::File::open(path)
        .and_then(|mut f| guppi::read_full(&mut f, &mut start))
        .map_err(|e| Error::io(path, e))?;
    match kind_of(&start[..n]) {
        Kind::Hdf5 => describe_fbh5(path),
        Kind::Raw => describe_raw(path),
        Kind::Filterbank => {
            let (h, spectra) = filterbank::read_header(path)?;
            Ok(Description {
                lines: filterbank_lines(path, &h, spectra),
                warnings: Vec::new(),
            })
        }
    }
}

/// A filterbank header's lines and its number of spectra.
fn filterbank_lines(file: &Path, h: &FilterbankHeader, spectra: u64) -> Vec<String> {
    [
        ("file", file.display().to_string()),
        ("telescope_id", h.telescope_id.to_string()),
        ("machine_id", h.machine_id.to_string()),
        ("data_type", h.data_type.to_string()),
        ("rawdatafile", h.rawdatafile.clone()),
        ("source_name", h.source_name.clone()),
        ("src_raj", h.src_raj.to_string()),
        ("src_dej", h.src_dej.to_string()),
        ("tstart", format!("{:.12}", h.tstart)),
        ("tsamp", format!("{:e}", h.tsamp)),
        ("fch1", format!("{:.9}", h.fch1)),
        ("foff", format!("{:e}", h.foff)),
        ("nchans", h.nchans.to_string()),
        ("nifs", h.nifs.to_string()),
        ("nbits", h.nbits.to_string()),
        ("ibeam", h.ibeam.to_string()),
        ("nbeams", h.nbeams.to_string()),
        ("spectra", spectra.to_string()),
    ]
    .iter()
    .map(|(name, value)| line(name, value))
    .collect()
}

/// `name` padded to 12 columns, then `value`.
fn line(name: &str, value: &str) -> String {
    format!("{name:<12} {value}")
}

/// An FBH5 file: the filterbank lines (`src_raj`/`src_dej` packed as in a `.fil`), then the
/// file's format version, compression and chunk shape.
#[cfg(feature = "fbh5")]
fn describe_fbh5(path: &Path) -> Result<Description> {
    let (h, info, spectra) = crate::fbh5::read_fbh5_header(path)?;
    let mut lines = filterbank_lines(path, &h, spectra);
    let chunk = info
        .chunk
        .map_or("none (contiguous)".into(), |c| format!("{c:?}"));
    let filter = if info.bitshuffle {
        "bitshuffle"
    } else {
        "none"
    };
    lines.push(line("version", &info.version));
    lines.push(line("filter", filter));
    lines.push(line("chunk", &chunk));
    Ok(Description {
        lines,
        warnings: Vec::new(),
    })
}

/// An FBH5 file in a build without HDF5: what to do instead.
#[cfg(not(feature = "fbh5"))]
fn describe_fbh5(path: &Path) -> Result<Description> {
    Err(Error::Unsupported(format!(
        "{}: an HDF5 (FBH5) file, which this build cannot read: build with the fbh5 feature, \
         cargo build --release -p cudagraph-spectrometer --features fbh5 (see the README)",
        path.display()
    )))
}

/// A GUPPI RAW file: the scan it belongs to (as a run reads it: its files, blocks, geometry,
/// gaps and truncations) and its first block's cards as written.
fn describe_raw(path: &Path) -> Result<Description> {
    let scan = Scan::open(path)?;
    let g = &scan.geometry;
    let read = (scan.slots.iter())
        .filter(|s| matches!(s, SlotKind::Data { .. }))
        .count();
    let mut lines: Vec<String> = [
        ("file", path.display().to_string()),
        ("stem", scan.stem.display().to_string()),
        ("files", scan.files.len().to_string()),
        (
            "blocks",
            format!(
                "{read} read, {} dropped (PKTIDX gaps)",
                scan.slot_count() - read
            ),
        ),
        ("blocsize", format!("{} bytes", g.blocsize)),
        (
            "obsnchan",
            format!(
                "{} ({} antenna(s) of {})",
                g.obsnchan, g.nants, g.nchan_per_ant
            ),
        ),
        ("npol", format!("{} complex polarisation(s)", g.npol)),
        ("nbits", g.nbits.to_string()),
        (
            "ntime",
            format!("{} samples per block, overlap {}", g.ntime, g.overlap),
        ),
        ("samples", format!("{} per channel", scan.samples_from(0))),
    ]
    .iter()
    .map(|(name, value)| line(name, value))
    .collect();
    lines.push(format!(
        "the header of {} block 0 ({} cards):",
        scan.files[0].display(),
        scan.header.cards.len()
    ));
    for (key, value) in &scan.header.cards {
        let mut card = format!("  {key:<8} =");
        match value {
            Value::Str(s) => write!(card, " '{s}'"),
            Value::Raw(r) => write!(card, " {r}"),
            Value::Blank => Ok(()),
        }
        .expect("writing to a String");
        lines.push(card);
    }
    Ok(Description {
        lines,
        warnings: scan.report_lines(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_by_first_bytes() {
        let card = |s: &str| format!("{s:<80}").into_bytes();
        assert_eq!(kind_of(&card("BACKEND = 'GUPPI   '")), Kind::Raw);
        assert_eq!(kind_of(&card("STT_IMJD= 60000")), Kind::Raw);
        assert_eq!(kind_of(b"\x89HDF\r\n\x1a\n\0\0"), Kind::Hdf5);
        // Short of a card, lower case, no `= ` in column 9, a control byte: not RAW.
        assert_eq!(kind_of(b"BACKEND = 'GUPPI'"), Kind::Filterbank);
        assert_eq!(kind_of(&card("backend = 'GUPPI'")), Kind::Filterbank);
        assert_eq!(kind_of(&card("BACKEND  'GUPPI'")), Kind::Filterbank);
        let mut c = card("BACKEND = 'GUPPI'");
        c[40] = b'\n';
        assert_eq!(kind_of(&c), Kind::Filterbank);
        // A filterbank header starts with the length of "HEADER_START".
        let mut fil = 12i32.to_le_bytes().to_vec();
        fil.extend_from_slice(b"HEADER_START");
        assert_eq!(kind_of(&fil), Kind::Filterbank);
    }
}
