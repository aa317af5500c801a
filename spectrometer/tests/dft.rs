//! The CPU engine against direct formulas: a hand-computed DFT, and a naive O(N²) DFT of the
//! generator's known samples for every detection, antenna mode, FFTs longer than a block,
//! integrations spanning blocks, and OVERLAP.

mod common;

use common::*;
use num_complex::Complex64;
use spectrometer::filterbank::Filterbank;
use spectrometer::generate::{GenerateSpec, Tone};
use spectrometer::guppi::Header;
use spectrometer::pipeline::{run, RunConfig};
use spectrometer::plan::{AntennaMode, Detection, ProductSpec, Selection};

/// One channel, one pol, 8-bit, Nfft 4: x = [1, i, −1, −i] is e^{2πi·n/4}, so S = [0, 4, 0, 0]
/// and the power 16 sits in FFT bin 1, which the fft shift puts in output channel
/// (1 − ⌈4/2⌉) mod 4 = 3. The second spectrum [2, 0, 0, 0] is flat: S = [2, 2, 2, 2], power 4.
#[test]
fn hand_computed_nfft4() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(8, 0);
    h.set_int("BLOCSIZE", 16);
    let samples: [(i8, i8); 8] = [
        (1, 0),
        (0, 1),
        (-1, 0),
        (0, -1),
        (2, 0),
        (0, 0),
        (0, 0),
        (0, 0),
    ];
    let data: Vec<u8> = samples
        .iter()
        .flat_map(|&(r, i)| [r as u8, i as u8])
        .collect();
    write_raw(&dir.path().join("hand.0000.raw"), &[(h, data)], false);
    let out = dir.path().join("out");
    let cfg = RunConfig {
        inputs: vec![dir.path().join("hand")],
        out_dir: out.clone(),
        products: vec![
            product(4, 1, Detection::TotalPower),
            product(4, 2, Detection::TotalPower),
        ],
        ..RunConfig::default()
    };
    run(&cfg).unwrap();
    let fb = Filterbank::read(&out.join("hand.0.fil")).unwrap();
    assert_eq!(fb.nsamples(), 2);
    assert_eq!(fb.data, vec![0.0, 0.0, 0.0, 16.0, 4.0, 4.0, 4.0, 4.0]);
    let fb = Filterbank::read(&out.join("hand.1.fil")).unwrap();
    assert_eq!(fb.data, vec![4.0, 4.0, 4.0, 20.0]);
}

/// Two pols by hand, Nfft 2: X = [1, 1] → S_X = [2, 0]; Y = [i, −i] → S_Y = [0, 2i].
/// Shift for N = 2: output k takes bin (k + 1) mod 2, so channel 0 = bin 1, channel 1 = bin 0.
/// Channel 0: XX 0, YY 4, XY* 0. Channel 1: XX 4, YY 0. I = [4, 4], Q = [−4, 4], U = V = 0.
#[test]
fn hand_computed_two_pols() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = minimal_header(2, 0);
    h.set_int("NPOL", 4);
    h.set_int("BLOCSIZE", 8);
    // [time][pol][re, im]
    let data: Vec<u8> = [1i8, 0, 0, 1, 1, 0, 0, -1]
        .iter()
        .map(|&v| v as u8)
        .collect();
    write_raw(&dir.path().join("pol.0000.raw"), &[(h, data)], false);
    let out = dir.path().join("out");
    let cfg = RunConfig {
        inputs: vec![dir.path().join("pol")],
        out_dir: out.clone(),
        products: vec![
            product(2, 1, Detection::Stokes),
            product(2, 1, Detection::FullPol),
        ],
        ..RunConfig::default()
    };
    run(&cfg).unwrap();
    let iquv = Filterbank::read(&out.join("pol.0.fil")).unwrap();
    assert_eq!(iquv.data, vec![4.0, 4.0, -4.0, 4.0, 0.0, 0.0, 0.0, 0.0]);
    let full = Filterbank::read(&out.join("pol.1.fil")).unwrap();
    assert_eq!(full.data, vec![0.0, 4.0, 4.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
}

fn sample_fn(spec: &GenerateSpec) -> impl Fn(usize, usize, usize, u64) -> Complex64 + '_ {
    move |a, c, pol, t| {
        let (re, im) = spec.quantized(a, c, pol, t);
        Complex64::new(re as f64, im as f64)
    }
}

fn check_against_dft(spec: &GenerateSpec, products: &[ProductSpec], sel: Selection) {
    let out = spec.dir.join("out");
    let report = gen_and_run(spec, products, sel.clone(), &out);
    let plan = &report.plan;
    let x = sample_fn(spec);
    let weights: Vec<f64> = plan.weights.iter().map(|&w| w as f64).collect();
    for (pi, p) in products.iter().enumerate() {
        let pp = &plan.products[pi];
        assert!(pp.integrations >= 1);
        for o in 0..plan.outputs.len() {
            let path = out.join(format!("{}.fil", plan.output_name(&spec.stem, pi, o)));
            let fb = Filterbank::read(&path).unwrap();
            assert_eq!(fb.nsamples() as u64, pp.integrations, "{}", path.display());
            for i in 0..pp.integrations {
                let want = expected_integration(
                    &x,
                    plan.geometry.npol,
                    p,
                    &plan.antennas,
                    &weights,
                    plan.mode,
                    plan.chan_start,
                    plan.nchan,
                    i,
                    o,
                );
                let per = pp.nifs * pp.nchans;
                let got = &fb.data[i as usize * per..(i as usize + 1) * per];
                let want: Vec<f64> = want.into_iter().flatten().collect();
                assert_close(
                    got,
                    &want,
                    2e-5,
                    &format!("{} integration {i}", path.display()),
                );
            }
        }
    }
}

#[test]
fn all_detections_match_naive_dft() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "det");
    spec.tones = vec![Tone {
        freq_mhz: 1398.3,
        amp_x: 20.0,
        amp_y: 10.0,
        phase_y_deg: 60.0,
    }];
    check_against_dft(
        &spec,
        &[
            product(8, 3, Detection::TotalPower),
            product(4, 5, Detection::FullPol),
            product(16, 2, Detection::Stokes),
            product(5, 7, Detection::Stokes), // odd FFT length
        ],
        Selection::default(),
    );
}

#[test]
fn fft_longer_than_a_block_and_integration_across_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "long");
    spec.ntime = 48;
    spec.blocks_per_file = 3;
    spec.files = 2;
    // 6 blocks × 48 = 288 samples: Nfft 128 spans three blocks; 32×3 spans two.
    check_against_dft(
        &spec,
        &[
            product(128, 2, Detection::TotalPower),
            product(32, 3, Detection::Stokes),
        ],
        Selection::default(),
    );
}

#[test]
fn overlap_samples_are_not_processed_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "ovl");
    spec.ntime = 80;
    spec.overlap = 16;
    spec.tones = vec![Tone::new(1401.0, 30.0)];
    check_against_dft(
        &spec,
        &[product(16, 4, Detection::FullPol)],
        Selection::default(),
    );
}

#[test]
fn antennas_separate_sum_and_selection() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "ants");
    spec.nants = 3;
    spec.nchan = 4;
    spec.antenna_gains = vec![1.0, 2.0, 0.5];
    spec.tones = vec![Tone::new(1401.7, 15.0)];
    let p = [product(8, 2, Detection::Stokes)];
    check_against_dft(
        &spec,
        &p,
        Selection {
            chan_start: 1,
            nchan: Some(2),
            ..Selection::default()
        },
    );
    let dir2 = tempfile::tempdir().unwrap();
    spec.dir = dir2.path().to_path_buf();
    check_against_dft(
        &spec,
        &p,
        Selection {
            mode: AntennaMode::Sum,
            weights: Some(vec![0.5, 1.0, 3.0]),
            ..Selection::default()
        },
    );
    let dir3 = tempfile::tempdir().unwrap();
    spec.dir = dir3.path().to_path_buf();
    check_against_dft(
        &spec,
        &p,
        Selection {
            antenna: Some(2),
            chan_start: 3,
            ..Selection::default()
        },
    );
}

#[test]
fn single_pol_and_4_and_16_bit_input() {
    for (nbits, npol) in [(4, 1), (16, 2), (8, 1)] {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = tiny(dir.path(), "bits");
        spec.nbits = nbits;
        spec.npol = npol;
        spec.noise = if nbits == 4 { 2.0 } else { 50.0 };
        spec.tones = vec![Tone::new(1399.1, if nbits == 4 { 3.0 } else { 100.0 })];
        check_against_dft(
            &spec,
            &[product(8, 4, Detection::TotalPower)],
            Selection::default(),
        );
    }
}

#[test]
fn header_values_are_not_what_the_test_helper_assumes_by_accident() {
    // Guard for the helpers above: a header built by minimal_header parses back as written.
    let h: Header = minimal_header(8, 5);
    let bytes = h.to_bytes(false);
    assert_eq!(bytes.len() % 80, 0);
    assert!(String::from_utf8_lossy(&bytes).contains("PKTIDX  ="));
}
