//! Helpers shared by the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use num_complex::Complex64;
use spectrometer::generate::{generate, GenerateSpec};
use spectrometer::guppi::Header;
use spectrometer::pipeline::{run, RunConfig, StemReport};
use spectrometer::plan::{AntennaMode, Detection, ProductSpec, Selection};

/// A small scan description in `dir` (noise only; callers add tones).
pub fn tiny(dir: &Path, stem: &str) -> GenerateSpec {
    GenerateSpec {
        dir: dir.to_path_buf(),
        stem: stem.to_string(),
        nchan: 2,
        nants: 1,
        npol: 4,
        nbits: 8,
        ntime: 64,
        overlap: 0,
        blocks_per_file: 4,
        files: 1,
        obsfreq: 1400.0,
        obsbw: 8.0,
        noise: 5.0,
        ..GenerateSpec::default()
    }
}

/// Generates `spec` and runs `products` over it with `sel`; outputs go to `out`.
pub fn gen_and_run(
    spec: &GenerateSpec,
    products: &[ProductSpec],
    sel: Selection,
    out: &Path,
) -> StemReport {
    generate(spec).expect("generate");
    let cfg = RunConfig {
        inputs: vec![spec.dir.join(&spec.stem)],
        out_dir: out.to_path_buf(),
        products: products.to_vec(),
        selection: sel,
        ..RunConfig::default()
    };
    run(&cfg).expect("run").remove(0)
}

pub fn product(nfft: usize, nint: usize, detection: Detection) -> ProductSpec {
    ProductSpec {
        nfft,
        nint,
        detection,
    }
}

/// Naive O(N²) forward DFT, unnormalised: S[j] = Σ x[n] e^{−2πi jn/N}.
pub fn dft(x: &[Complex64]) -> Vec<Complex64> {
    let n = x.len();
    (0..n)
        .map(|j| {
            x.iter()
                .enumerate()
                .map(|(m, v)| {
                    let ph = -std::f64::consts::TAU * (j * m % n) as f64 / n as f64;
                    v * Complex64::new(ph.cos(), ph.sin())
                })
                .sum()
        })
        .collect()
}

/// What an integration must hold, from the formulas: `x(a, c, pol, t)` gives input samples
/// (t on the processed time axis); returns `[if][ch]` for integration `i` of output `o`.
#[allow(clippy::too_many_arguments)]
pub fn expected_integration(
    x: &dyn Fn(usize, usize, usize, u64) -> Complex64,
    npol: usize,
    p: &ProductSpec,
    antennas: &[usize],
    weights: &[f64],
    mode: AntennaMode,
    chan_start: usize,
    nchan: usize,
    i: u64,
    o: usize,
) -> Vec<Vec<f64>> {
    let n = p.nfft;
    let nifs = p.detection.nifs();
    let mut out = vec![vec![0.0; nchan * n]; nifs];
    let used: Vec<(usize, f64)> = match mode {
        AntennaMode::Separate => vec![(antennas[o], 1.0)],
        AntennaMode::Sum => antennas
            .iter()
            .copied()
            .zip(weights.iter().copied())
            .collect(),
    };
    for c in 0..nchan {
        for s in 0..p.nint as u64 {
            let t0 = (i * p.nint as u64 + s) * n as u64;
            for &(a, w) in &used {
                let spec = |pol: usize| {
                    let v: Vec<Complex64> = (0..n as u64)
                        .map(|m| x(a, chan_start + c, pol, t0 + m))
                        .collect();
                    dft(&v)
                };
                let sx = spec(0);
                let sy = if npol == 2 {
                    spec(1)
                } else {
                    vec![Complex64::default(); n]
                };
                for k in 0..n {
                    let j = (k + n.div_ceil(2)) % n;
                    let (xx, yy) = (sx[j].norm_sqr(), sy[j].norm_sqr());
                    let xy = sx[j] * sy[j].conj();
                    let vals: Vec<f64> = match p.detection {
                        Detection::TotalPower => vec![xx + yy],
                        Detection::FullPol => vec![xx, yy, xy.re, xy.im],
                        Detection::Stokes => vec![xx + yy, xx - yy, 2.0 * xy.re, -2.0 * xy.im],
                    };
                    for (ifx, v) in vals.into_iter().enumerate() {
                        out[ifx][c * n + k] += w * v;
                    }
                }
            }
        }
    }
    out
}

/// Writes a RAW file made of the given (header, data) blocks.
pub fn write_raw(path: &Path, blocks: &[(Header, Vec<u8>)], directio: bool) {
    let mut bytes = Vec::new();
    for (h, d) in blocks {
        bytes.extend_from_slice(&h.to_bytes(directio));
        bytes.extend_from_slice(d);
    }
    std::fs::write(path, bytes).unwrap();
}

/// A minimal valid header: 1 channel, NPOL 1, 8 bits, `ntime` samples.
pub fn minimal_header(ntime: usize, pktidx: i64) -> Header {
    let mut h = Header::default();
    h.set_int("BLOCSIZE", (ntime * 2) as i64);
    h.set_int("OBSNCHAN", 1);
    h.set_int("NPOL", 1);
    h.set_int("NBITS", 8);
    h.set_float("OBSFREQ", 1000.0);
    h.set_float("OBSBW", 1.0);
    h.set_float("TBIN", 1e-6);
    h.set_int("STT_IMJD", 59000);
    h.set_int("STT_SMJD", 0);
    h.set_int("PKTIDX", pktidx);
    h
}

/// Files in a directory (empty when it does not exist).
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Asserts that `a` and `b` agree to `rel` of the largest magnitude in `b`.
pub fn assert_close(a: &[f32], b: &[f64], rel: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    let scale = b.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x as f64 - y).abs() <= rel * scale,
            "{what}: element {i}: got {x}, expected {y} (scale {scale})"
        );
    }
}
