//! FBH5 files: Breakthrough Listen's HDF5 filterbank format, as rawspec (`-j`) and blimpy write
//! it (only with the `fbh5` feature, which needs the HDF5 C library).
//!
//! The layout, as blimpy reads it (`blimpy.io.hdf_reader`):
//!
//! - file attributes `CLASS = "FILTERBANK"` and `VERSION = "2.0"` (rawspec's; blimpy accepts
//!   1.0 and 2.0), plus `BITSHUFFLE` (`ENABLED` or `DISABLED`), `VERSION_HDF5` and
//!   `VERSION_CUDAGRAPH_SPECTROMETER`, as rawspec records its own versions;
//! - one dataset, `data`: `f32`, shape (time, IF, channel), chunked, compressed with the
//!   bitshuffle filter (HDF5 filter 32008, LZ4 inside) when HDF5 can load that plugin (it looks
//!   in `HDF5_PLUGIN_PATH`, then its built-in plugin directory); uncompressed otherwise;
//! - the dataset's dimension labels (`time`, `feed_id`, `frequency`, the `DIMENSION_LABELS`
//!   attribute HDF5's dimension-scale API writes);
//! - the filterbank header as the dataset's attributes, under SIGPROC's names: integers
//!   `telescope_id machine_id data_type nchans nifs nbits ibeam nbeams`, doubles `tstart tsamp
//!   fch1 foff src_raj src_dej`, strings `source_name rawdatafile`. In FBH5 `src_raj` is in
//!   decimal hours and `src_dej` in decimal degrees (blimpy reads them as such; a `.fil` packs
//!   them as `hhmmss.s` and `ddmmss.s`), so [`FilterbankHeader`]'s packed values are converted
//!   on the way in and out.
//!
//! A file holds a known number of spectra (the plan's integrations). The writer buffers the
//! spectra of one chunk's worth of rows and writes them as whole chunks, so that a compressed
//! chunk is written once, never read back and rewritten.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use hdf5::types::VarLenUnicode;

use crate::error::{Error, Result};
use crate::filterbank::{Filterbank, FilterbankHeader};

/// HDF5's registered identifier of the bitshuffle filter.
pub const BITSHUFFLE_FILTER: hdf5::filters::H5Z_filter_t = 32008;
/// The bitshuffle filter's options: block size 0 (its default) and 2 (LZ4 compression after the
/// shuffle), as rawspec and blimpy (`hdf5plugin.Bitshuffle(nelems=0, lz4=True)`) set them.
const BITSHUFFLE_OPTIONS: [u32; 2] = [0, 2];
/// Elements in a chunk, at most (4 MiB of `f32`).
const CHUNK_ELEMENTS: usize = 1 << 20;

/// Whether HDF5 can load the bitshuffle filter (for writing and reading).
pub fn bitshuffle_available() -> bool {
    let filter = hdf5::filters::Filter::user(BITSHUFFLE_FILTER, &[]);
    filter.is_available() && filter.encode_enabled() && filter.decode_enabled()
}

/// How the `data` dataset is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Bitshuffle with LZ4 when HDF5 can load the plugin, none otherwise (what
    /// [`Fbh5Writer::create`] does, and rawspec).
    Auto,
    /// Bitshuffle with LZ4; an error when the plugin is not available.
    Bitshuffle,
    /// None.
    None,
}

/// Writes one FBH5 file: [`create`](Self::create), one [`write_spectrum`](Self::write_spectrum)
/// per integration, [`finish`](Self::finish).
pub struct Fbh5Writer {
    path: PathBuf,
    file: hdf5::File,
    data: hdf5::Dataset,
    nifs: usize,
    nchans: usize,
    nints: usize,
    /// Rows (spectra) per chunk.
    rows: usize,
    /// Spectra received but not yet written (fewer than `rows`).
    pending: Vec<f32>,
    /// Spectra received.
    received: usize,
    compressed: bool,
}

impl std::fmt::Debug for Fbh5Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fbh5Writer")
            .field("path", &self.path)
            .field("shape", &(self.nints, self.nifs, self.nchans))
            .field("rows_per_chunk", &self.rows)
            .field("received", &self.received)
            .field("compressed", &self.compressed)
            .finish()
    }
}

fn h5err(path: &Path) -> impl Fn(hdf5::Error) -> Error + '_ {
    move |e| Error::Fbh5 {
        path: path.to_path_buf(),
        reason: e.to_string(),
    }
}

fn bad(path: &Path, reason: impl Into<String>) -> Error {
    Error::Fbh5 {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// A string attribute's value: HDF5 strings cannot hold NUL.
fn text(s: &str) -> VarLenUnicode {
    let clean: String = s.chars().filter(|&c| c != '\0').collect();
    VarLenUnicode::from_str(&clean).expect("a string without NUL is a valid VarLenUnicode")
}

fn put_str(loc: &hdf5::Location, name: &str, value: &str) -> hdf5::Result<()> {
    loc.new_attr::<VarLenUnicode>()
        .create(name)?
        .write_scalar(&text(value))
}

fn put_i32(loc: &hdf5::Location, name: &str, value: i32) -> hdf5::Result<()> {
    loc.new_attr::<i32>().create(name)?.write_scalar(&value)
}

fn put_f64(loc: &hdf5::Location, name: &str, value: f64) -> hdf5::Result<()> {
    loc.new_attr::<f64>().create(name)?.write_scalar(&value)
}

/// `hhmmss.s` (or `±ddmmss.s`) to decimal hours (degrees).
pub fn unpack_sexagesimal(packed: f64) -> f64 {
    let a = packed.abs();
    let d = (a / 10000.0).floor();
    let m = ((a - d * 10000.0) / 100.0).floor();
    let s = a - d * 10000.0 - m * 100.0;
    (d + m / 60.0 + s / 3600.0).copysign(packed)
}

/// Decimal hours (degrees) to `hhmmss.s` (`±ddmmss.s`); the inverse of [`unpack_sexagesimal`]
/// up to rounding.
pub fn pack_decimal(decimal: f64) -> f64 {
    let a = decimal.abs();
    let d = a.floor();
    let mf = (a - d) * 60.0;
    let m = mf.floor();
    let s = (mf - m) * 60.0;
    (d * 10000.0 + m * 100.0 + s).copysign(decimal)
}

impl Fbh5Writer {
    /// Creates (or truncates) `path` for `nints` spectra of `header`'s shape, compressed with
    /// bitshuffle when HDF5 can load it ([`Compression::Auto`]).
    pub fn create(path: &Path, header: &FilterbankHeader, nints: usize) -> Result<Self> {
        Self::create_with(path, header, nints, Compression::Auto)
    }

    /// [`create`](Self::create) with the compression chosen.
    pub fn create_with(
        path: &Path,
        header: &FilterbankHeader,
        nints: usize,
        compression: Compression,
    ) -> Result<Self> {
        let err = h5err(path);
        let (nifs, nchans) = match (usize::try_from(header.nifs), usize::try_from(header.nchans)) {
            (Ok(i), Ok(c)) if i > 0 && c > 0 => (i, c),
            _ => {
                return Err(bad(
                    path,
                    format!(
                        "nifs {} and nchans {} must both be positive",
                        header.nifs, header.nchans
                    ),
                ))
            }
        };
        if header.nbits != 32 {
            return Err(bad(
                path,
                format!("nbits {}: only 32-bit floats are written", header.nbits),
            ));
        }
        let compressed = match compression {
            Compression::None => false,
            Compression::Auto => bitshuffle_available(),
            Compression::Bitshuffle if bitshuffle_available() => true,
            Compression::Bitshuffle => {
                return Err(bad(
                    path,
                    "the bitshuffle filter (HDF5 plugin 32008) is not available: install it \
                     (Debian: bitshuffle; or the hdf5plugin Python package) or point \
                     HDF5_PLUGIN_PATH at it",
                ))
            }
        };
        let cchan = nchans.min(CHUNK_ELEMENTS);
        let rows = (CHUNK_ELEMENTS / cchan).clamp(1, nints.max(1));
        let file = hdf5::File::create(path).map_err(&err)?;
        let attrs = || -> hdf5::Result<hdf5::Dataset> {
            put_str(&file, "CLASS", "FILTERBANK")?;
            put_str(&file, "VERSION", "2.0")?;
            put_str(
                &file,
                "VERSION_CUDAGRAPH_SPECTROMETER",
                env!("CARGO_PKG_VERSION"),
            )?;
            let (a, b, c) = hdf5::library_version();
            put_str(&file, "VERSION_HDF5", &format!("{a}.{b}.{c}"))?;
            put_str(
                &file,
                "BITSHUFFLE",
                if compressed { "ENABLED" } else { "DISABLED" },
            )?;
            let mut builder = file.new_dataset::<f32>().chunk((rows, 1, cchan));
            if compressed {
                builder = builder.add_filter(BITSHUFFLE_FILTER, &BITSHUFFLE_OPTIONS);
            }
            // Resizable in time, so that a file of no spectra is still a valid chunked dataset.
            let data = builder
                .shape((hdf5::Extent::resizable(nints), nifs, nchans))
                .create("data")?;
            let labels = ["time", "feed_id", "frequency"].map(text);
            data.new_attr::<VarLenUnicode>()
                .shape(3)
                .create("DIMENSION_LABELS")?
                .write_raw(&labels)?;
            for (k, v) in [
                ("telescope_id", header.telescope_id),
                ("machine_id", header.machine_id),
                ("data_type", header.data_type),
                ("nchans", header.nchans),
                ("nifs", header.nifs),
                ("nbits", header.nbits),
                ("ibeam", header.ibeam),
                ("nbeams", header.nbeams),
            ] {
                put_i32(&data, k, v)?;
            }
            for (k, v) in [
                ("tstart", header.tstart),
                ("tsamp", header.tsamp),
                ("fch1", header.fch1),
                ("foff", header.foff),
                ("src_raj", unpack_sexagesimal(header.src_raj)),
                ("src_dej", unpack_sexagesimal(header.src_dej)),
            ] {
                put_f64(&data, k, v)?;
            }
            put_str(&data, "source_name", &header.source_name)?;
            put_str(&data, "rawdatafile", &header.rawdatafile)?;
            Ok(data)
        };
        let data = attrs().map_err(&err)?;
        Ok(Fbh5Writer {
            path: path.to_path_buf(),
            file,
            data,
            nifs,
            nchans,
            nints,
            rows,
            pending: Vec::with_capacity(rows * nifs * nchans),
            received: 0,
            compressed,
        })
    }

    /// Whether the data are bitshuffle-compressed.
    pub fn compressed(&self) -> bool {
        self.compressed
    }

    /// Appends one spectrum (one integration): `nifs × nchans` values, IF-major.
    pub fn write_spectrum(&mut self, spectrum: &[f32]) -> Result<()> {
        let want = self.nifs * self.nchans;
        if spectrum.len() != want {
            return Err(bad(
                &self.path,
                format!(
                    "a spectrum of {} values, expected nifs × nchans = {want}",
                    spectrum.len()
                ),
            ));
        }
        if self.received == self.nints {
            return Err(bad(
                &self.path,
                format!("more than the {} spectra the file was made for", self.nints),
            ));
        }
        self.pending.extend_from_slice(spectrum);
        self.received += 1;
        if self.pending.len() == self.rows * want {
            self.flush_rows()?;
        }
        Ok(())
    }

    /// Writes the pending rows, which end at `received`.
    fn flush_rows(&mut self) -> Result<()> {
        let n = self.pending.len() / (self.nifs * self.nchans);
        if n == 0 {
            return Ok(());
        }
        let start = self.received - n;
        let view = ndarray::ArrayView3::from_shape((n, self.nifs, self.nchans), &self.pending)
            .expect("pending holds whole spectra");
        self.data
            .write_slice(view, (start..self.received, .., ..))
            .map_err(h5err(&self.path))?;
        self.pending.clear();
        Ok(())
    }

    /// Writes what is pending and closes the file; an error unless every spectrum was written.
    pub fn finish(mut self) -> Result<()> {
        if self.received != self.nints {
            return Err(bad(
                &self.path,
                format!(
                    "{} spectra written, the file was made for {}",
                    self.received, self.nints
                ),
            ));
        }
        self.flush_rows()?;
        let err = h5err(&self.path);
        drop(self.data);
        self.file.flush().map_err(&err)?;
        self.file.close().map_err(&err)
    }
}

/// What [`read_fbh5`] found besides the data.
#[derive(Debug, Clone, PartialEq)]
pub struct Fbh5Info {
    /// The file's `VERSION` attribute.
    pub version: String,
    /// Whether `data` goes through the bitshuffle filter.
    pub bitshuffle: bool,
    /// The dataset's chunk shape.
    pub chunk: Option<Vec<usize>>,
}

/// Reads an FBH5 file of 32-bit floats (as this program, rawspec and blimpy write them) into a
/// [`Filterbank`], with `src_raj`/`src_dej` packed again as in a `.fil`.
pub fn read_fbh5(path: &Path) -> Result<(Filterbank, Fbh5Info)> {
    let (data, header, info) = open_fbh5(path)?;
    let values = data.read_raw::<f32>().map_err(h5err(path))?;
    Ok((
        Filterbank {
            header,
            data: values,
        },
        info,
    ))
}

/// The header of the FBH5 file at `path` (as [`read_fbh5`] reads it), what else it found, and
/// the number of spectra, without reading the data.
pub fn read_fbh5_header(path: &Path) -> Result<(FilterbankHeader, Fbh5Info, u64)> {
    let (data, header, info) = open_fbh5(path)?;
    Ok((header, info, data.shape()[0] as u64))
}

/// The `data` dataset of the FBH5 file at `path` (three axes, checked against the header), its
/// header and what else [`read_fbh5`] reports.
fn open_fbh5(path: &Path) -> Result<(hdf5::Dataset, FilterbankHeader, Fbh5Info)> {
    let err = h5err(path);
    let file = hdf5::File::open(path).map_err(&err)?;
    let get_str = |loc: &hdf5::Location, name: &str| -> Result<String> {
        let a = loc.attr(name).map_err(&err)?;
        match a.read_scalar::<VarLenUnicode>() {
            Ok(s) => Ok(s.as_str().to_owned()),
            Err(_) => a
                .read_scalar::<hdf5::types::VarLenAscii>()
                .map(|s| s.as_str().to_owned())
                .or_else(|_| {
                    // rawspec writes fixed-length strings.
                    a.read_raw::<u8>().map(|b| {
                        String::from_utf8_lossy(&b)
                            .trim_end_matches('\0')
                            .to_owned()
                    })
                })
                .map_err(&err),
        }
    };
    let class = get_str(&file, "CLASS")?;
    if class != "FILTERBANK" {
        return Err(bad(path, format!("CLASS is {class:?}, not \"FILTERBANK\"")));
    }
    let version = get_str(&file, "VERSION")?;
    let data = file.dataset("data").map_err(&err)?;
    let shape = data.shape();
    if shape.len() != 3 {
        return Err(bad(
            path,
            format!("data has shape {shape:?}, expected 3 axes"),
        ));
    }
    let int = |name: &str| {
        data.attr(name)
            .and_then(|a| a.read_scalar::<i32>())
            .map_err(&err)
    };
    let float = |name: &str| {
        data.attr(name)
            .and_then(|a| a.read_scalar::<f64>())
            .map_err(&err)
    };
    let header = FilterbankHeader {
        telescope_id: int("telescope_id")?,
        machine_id: int("machine_id")?,
        data_type: int("data_type")?,
        rawdatafile: get_str(&data, "rawdatafile")?,
        source_name: get_str(&data, "source_name")?,
        src_raj: pack_decimal(float("src_raj")?),
        src_dej: pack_decimal(float("src_dej")?),
        tstart: float("tstart")?,
        tsamp: float("tsamp")?,
        fch1: float("fch1")?,
        foff: float("foff")?,
        nchans: int("nchans")?,
        nifs: int("nifs")?,
        nbits: int("nbits")?,
        ibeam: int("ibeam")?,
        nbeams: int("nbeams")?,
    };
    if usize::try_from(header.nifs).ok() != Some(shape[1])
        || usize::try_from(header.nchans).ok() != Some(shape[2])
    {
        return Err(bad(
            path,
            format!(
                "data has shape {shape:?} but the header says nifs {} and nchans {}",
                header.nifs, header.nchans
            ),
        ));
    }
    let info = Fbh5Info {
        version,
        bitshuffle: data.filters().iter().any(|f| f.id() == BITSHUFFLE_FILTER),
        chunk: data.chunk(),
    };
    Ok((data, header, info))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sexagesimal_round_trip() {
        for packed in [123456.5, -50607.25, 3000.0, 0.0, 235959.9] {
            let back = pack_decimal(unpack_sexagesimal(packed));
            assert!((back - packed).abs() < 1e-6, "{packed} -> {back}");
        }
        assert!((unpack_sexagesimal(123000.0) - 12.5).abs() < 1e-12);
        assert!((unpack_sexagesimal(-303000.0) + 30.5).abs() < 1e-12);
    }
}
