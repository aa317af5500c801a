//! What a run computes: the products (FFT length, integration length, detection), the channel
//! and antenna selection, and the output frequency and time axes. Independent of the engine.

use std::str::FromStr;

use crate::error::{Error, Result};
use crate::guppi::{Geometry, ObsInfo};
use crate::scan::Scan;

/// The most products one run computes.
pub const MAX_PRODUCTS: usize = 4;

/// How complex voltages become powers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detection {
    /// Total power, one IF: `|X|² + |Y|²` (`|X|²` for single-pol input).
    TotalPower,
    /// Four IFs, in this order: `XX = |X|²`, `YY = |Y|²`, `Re(X·Y*)`, `Im(X·Y*)`.
    FullPol,
    /// Four IFs, in this order: `I = XX + YY`, `Q = XX − YY`, `U = 2 Re(X·Y*)`,
    /// `V = −2 Im(X·Y*)` (= `2 Im(X*·Y)`).
    Stokes,
}

impl Detection {
    /// Number of IFs (`nifs` in the filterbank header).
    pub fn nifs(self) -> usize {
        match self {
            Detection::TotalPower => 1,
            Detection::FullPol | Detection::Stokes => 4,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Detection::TotalPower => "i",
            Detection::FullPol => "full",
            Detection::Stokes => "iquv",
        }
    }

    /// Labels of the IFs, in order.
    pub fn if_labels(self) -> &'static [&'static str] {
        match self {
            Detection::TotalPower => &["I"],
            Detection::FullPol => &["XX", "YY", "RE XY*", "IM XY*"],
            Detection::Stokes => &["I", "Q", "U", "V"],
        }
    }
}

impl FromStr for Detection {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "i" | "power" | "total" => Ok(Detection::TotalPower),
            "full" | "xy" | "fullpol" => Ok(Detection::FullPol),
            "iquv" | "stokes" => Ok(Detection::Stokes),
            other => Err(format!("unknown detection {other:?} (i, full or iquv)")),
        }
    }
}

/// One output product: `nfft` fine channels per coarse channel, `nint` spectra per integration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProductSpec {
    /// FFT length (fine channels per coarse channel), ≥ 1.
    pub nfft: usize,
    /// Spectra summed per output integration, ≥ 1.
    pub nint: usize,
    /// Detection.
    pub detection: Detection,
}

fn parse_size(s: &str) -> Option<usize> {
    if let Some((b, e)) = s.split_once('^') {
        let b: usize = b.trim().parse().ok()?;
        let e: u32 = e.trim().parse().ok()?;
        b.checked_pow(e)
    } else {
        s.trim().parse().ok()
    }
}

impl FromStr for ProductSpec {
    type Err = Error;
    /// `NFFTxNINT[:MODE]`, sizes as integers or powers (`2^20`), MODE `i` (default), `full` or
    /// `iquv`: `2^20x51`, `8x128:iquv`, `1024x3072:full`.
    fn from_str(s: &str) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidProduct {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        let (sizes, mode) = match s.split_once(':') {
            Some((a, m)) => (a, Some(m)),
            None => (s, None),
        };
        let (a, b) = sizes
            .split_once(['x', 'X', '*'])
            .ok_or_else(|| invalid("expected NFFTxNINT[:MODE], e.g. 1024x16 or 2^20x51:i"))?;
        let nfft = parse_size(a).ok_or_else(|| invalid("NFFT is not a number"))?;
        let nint = parse_size(b).ok_or_else(|| invalid("NINT is not a number"))?;
        if nfft == 0 || nint == 0 {
            return Err(invalid("NFFT and NINT must be at least 1"));
        }
        let detection = match mode {
            None => Detection::TotalPower,
            Some(m) => m.parse().map_err(|e: String| invalid(&e))?,
        };
        Ok(ProductSpec {
            nfft,
            nint,
            detection,
        })
    }
}

/// Per-antenna outputs or their incoherent sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AntennaMode {
    /// One output per selected antenna.
    #[default]
    Separate,
    /// One output: the weighted sum of the selected antennas' detected powers.
    Sum,
}

/// Channel, antenna and time selection.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Selection {
    /// First coarse channel (per antenna, 0-based).
    pub chan_start: usize,
    /// Number of coarse channels (None: to the last).
    pub nchan: Option<usize>,
    /// One antenna (0-based), or None for all.
    pub antenna: Option<usize>,
    /// Separate outputs or an incoherent sum.
    pub mode: AntennaMode,
    /// Per-antenna weights for [`AntennaMode::Sum`], one per selected antenna (None: all 1).
    pub weights: Option<Vec<f32>>,
    /// Blocks (slots, gaps included) skipped at the start of the scan.
    pub skip_blocks: usize,
}

/// One output stream of a product.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputId {
    /// The detected power of one input antenna (0-based index in the file).
    Antenna(usize),
    /// The weighted incoherent sum of the selected antennas.
    Sum,
}

/// A product with its axes.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductPlan {
    /// Product index (0-based, order given).
    pub index: usize,
    /// FFT length.
    pub nfft: usize,
    /// Spectra per integration.
    pub nint: usize,
    /// Detection.
    pub detection: Detection,
    /// IFs per integration.
    pub nifs: usize,
    /// Output channels: selected coarse channels × `nfft`.
    pub nchans: usize,
    /// Centre frequency of output channel 0, MHz.
    pub fch1: f64,
    /// Output channel spacing, MHz (negative when `OBSBW` is).
    pub foff: f64,
    /// Integration time, s: `TBIN × nfft × nint`.
    pub tsamp: f64,
    /// MJD of the first processed sample.
    pub tstart: f64,
    /// Whole integrations the run produces.
    pub integrations: u64,
    /// Samples per channel at the end that do not fill an integration (not processed into output).
    pub dropped_samples: u64,
}

impl ProductPlan {
    /// Centre frequency (MHz) of output channel `ch`: `fch1 + ch × foff`.
    pub fn frequency(&self, ch: usize) -> f64 {
        self.fch1 + ch as f64 * self.foff
    }

    /// `f32` values in one integration of one output: `nifs × nchans`.
    pub fn integration_len(&self) -> usize {
        self.nifs * self.nchans
    }
}

/// Everything an engine and the writers need to know about a run over one scan.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Block geometry of the scan.
    pub geometry: Geometry,
    /// Scan metadata.
    pub info: ObsInfo,
    /// First selected coarse channel (per antenna).
    pub chan_start: usize,
    /// Selected coarse channels.
    pub nchan: usize,
    /// Selected input antennas, in order.
    pub antennas: Vec<usize>,
    /// Weight of each selected antenna in the sum (all 1 for separate outputs).
    pub weights: Vec<f32>,
    /// Separate or summed outputs.
    pub mode: AntennaMode,
    /// The outputs of every product, in output-index order.
    pub outputs: Vec<OutputId>,
    /// The products.
    pub products: Vec<ProductPlan>,
    /// First processed slot of the scan.
    pub first_slot: usize,
    /// Slots (blocks, gaps included) processed.
    pub blocks: usize,
    /// Samples per channel processed (gaps included).
    pub samples: u64,
}

impl Plan {
    /// Checks the request against the scan and computes the axes.
    pub fn new(scan: &Scan, specs: &[ProductSpec], sel: &Selection) -> Result<Plan> {
        let g = scan.geometry;
        if specs.len() > MAX_PRODUCTS {
            return Err(Error::TooManyProducts {
                count: specs.len(),
                max: MAX_PRODUCTS,
            });
        }
        if specs.is_empty() {
            return Err(Error::InvalidProduct {
                spec: String::new(),
                reason: "no product requested".into(),
            });
        }
        if sel.chan_start >= g.nchan_per_ant {
            return Err(Error::Selection(format!(
                "first channel {} is beyond the {} coarse channels per antenna",
                sel.chan_start, g.nchan_per_ant
            )));
        }
        let nchan = sel.nchan.unwrap_or(g.nchan_per_ant - sel.chan_start);
        if nchan == 0 || nchan > g.nchan_per_ant - sel.chan_start {
            return Err(Error::Selection(format!(
                "{nchan} channel(s) from channel {} do not fit the {} coarse channels per antenna",
                sel.chan_start, g.nchan_per_ant
            )));
        }
        let antennas: Vec<usize> = match sel.antenna {
            Some(a) if a >= g.nants => {
                return Err(Error::Selection(format!(
                    "antenna {a} does not exist (NANTS = {})",
                    g.nants
                )))
            }
            Some(a) => vec![a],
            None => (0..g.nants).collect(),
        };
        let weights = match (&sel.weights, sel.mode) {
            (None, _) => vec![1.0; antennas.len()],
            (Some(w), AntennaMode::Sum) if w.len() == antennas.len() => w.clone(),
            (Some(w), AntennaMode::Sum) => {
                return Err(Error::Selection(format!(
                    "{} antenna weight(s) given for {} selected antenna(s)",
                    w.len(),
                    antennas.len()
                )))
            }
            (Some(_), AntennaMode::Separate) => {
                return Err(Error::Selection(
                    "antenna weights apply only to the incoherent sum (--antenna-mode sum)".into(),
                ))
            }
        };
        let outputs = match sel.mode {
            AntennaMode::Separate => antennas.iter().map(|&a| OutputId::Antenna(a)).collect(),
            AntennaMode::Sum => vec![OutputId::Sum],
        };
        if sel.skip_blocks >= scan.slot_count() {
            return Err(Error::Selection(format!(
                "skipping {} block(s) leaves nothing of the scan's {}",
                sel.skip_blocks,
                scan.slot_count()
            )));
        }
        let samples = scan.samples_from(sel.skip_blocks);
        let info = &scan.info;
        let tstart =
            info.start_mjd() + (sel.skip_blocks * g.new_samples()) as f64 * info.tbin / 86400.0;
        let mut products = Vec::new();
        for (index, s) in specs.iter().enumerate() {
            if s.detection != Detection::TotalPower && g.npol < 2 {
                return Err(Error::InvalidProduct {
                    spec: format!("{}x{}:{}", s.nfft, s.nint, s.detection.name()),
                    reason: "full-polarisation detection needs two polarisations (NPOL 2 or 4)"
                        .into(),
                });
            }
            let spec = || format!("{}x{}", s.nfft, s.nint);
            // Checked: a wrapped product could be 0 (and then divide by it).
            let needed = (s.nfft as u64).checked_mul(s.nint as u64).ok_or_else(|| {
                Error::InvalidProduct {
                    spec: spec(),
                    reason: "Nfft × Nint does not fit in 64 bits".into(),
                }
            })?;
            let nchans = nchan
                .checked_mul(s.nfft)
                .ok_or_else(|| Error::InvalidProduct {
                    spec: spec(),
                    reason: format!("{nchan} channels × Nfft does not fit in 64 bits"),
                })?;
            if samples < needed {
                return Err(Error::NotEnoughSamples {
                    product: index,
                    nfft: s.nfft,
                    nint: s.nint,
                    needed,
                    available: samples,
                });
            }
            let foff = info.chan_bw / s.nfft as f64;
            let integrations = samples / needed;
            products.push(ProductPlan {
                index,
                nfft: s.nfft,
                nint: s.nint,
                detection: s.detection,
                nifs: s.detection.nifs(),
                nchans,
                fch1: info.coarse_centre(sel.chan_start) - (s.nfft / 2) as f64 * foff,
                foff,
                tsamp: info.tbin * needed as f64,
                tstart,
                integrations,
                dropped_samples: samples - integrations * needed,
            });
        }
        Ok(Plan {
            geometry: g,
            info: info.clone(),
            chan_start: sel.chan_start,
            nchan,
            antennas,
            weights,
            mode: sel.mode,
            outputs,
            products,
            first_slot: sel.skip_blocks,
            blocks: scan.slot_count() - sel.skip_blocks,
            samples,
        })
    }

    /// The base name (no extension) of an output file: `stem.P` when the input has one antenna,
    /// `stem.antA.P` for antenna A of several, `stem.sum.P` for the incoherent sum.
    pub fn output_name(&self, stem_name: &str, product: usize, output: usize) -> String {
        match self.outputs[output] {
            OutputId::Antenna(_) if self.geometry.nants == 1 => format!("{stem_name}.{product}"),
            OutputId::Antenna(a) => format!("{stem_name}.ant{a}.{product}"),
            OutputId::Sum => format!("{stem_name}.sum.{product}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_syntax() {
        let p: ProductSpec = "2^20x51".parse().unwrap();
        assert_eq!(
            (p.nfft, p.nint, p.detection),
            (1 << 20, 51, Detection::TotalPower)
        );
        let p: ProductSpec = "8x128:iquv".parse().unwrap();
        assert_eq!((p.nfft, p.nint, p.detection), (8, 128, Detection::Stokes));
        let p: ProductSpec = "1024X3072:full".parse().unwrap();
        assert_eq!(p.detection, Detection::FullPol);
        assert!(matches!(
            "0x4".parse::<ProductSpec>(),
            Err(Error::InvalidProduct { .. })
        ));
        assert!(matches!(
            "16x4:xyz".parse::<ProductSpec>(),
            Err(Error::InvalidProduct { .. })
        ));
        assert!(matches!(
            "16".parse::<ProductSpec>(),
            Err(Error::InvalidProduct { .. })
        ));
    }
}
