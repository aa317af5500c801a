//! Tones land in the fine channels the header's frequency axis says; header times and
//! frequencies agree with the input's, for either sign of OBSBW, with channel selection and
//! skipped blocks.

mod common;

use common::*;
use spectrometer::filterbank::Filterbank;
use spectrometer::generate::Tone;
use spectrometer::plan::{Detection, Selection};

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i)
        .unwrap()
}

#[test]
fn tones_land_where_fch1_and_foff_say_for_both_band_directions() {
    for obsbw in [12.5f64, -12.5] {
        let dir = tempfile::tempdir().unwrap();
        let mut spec = tiny(dir.path(), "tone");
        spec.nchan = 4;
        spec.obsfreq = 1420.0;
        spec.obsbw = obsbw;
        spec.ntime = 256;
        spec.noise = 1.0;
        let nfft = 64;
        let fine = spec.chan_bw().abs() / nfft as f64;
        // Tone 1: coarse channel 1, 5 fine channels above its centre; tone 2: channel 3, 20 below.
        let f1 = spec.coarse_centre(1) + 5.0 * fine;
        let f2 = spec.coarse_centre(3) - 20.0 * fine;
        for (f, sel_start) in [(f1, 0usize), (f2, 2)] {
            spec.tones = vec![Tone::new(f, 30.0)];
            let out = dir.path().join(format!("out{sel_start}"));
            let sel = Selection {
                chan_start: sel_start,
                nchan: Some(2),
                ..Selection::default()
            };
            let r = gen_and_run(&spec, &[product(nfft, 4, Detection::TotalPower)], sel, &out);
            let fb = Filterbank::read(&out.join("tone.0.fil")).unwrap();
            let h = &fb.header;
            // The axis from the header alone.
            assert_eq!(h.nchans as usize, 2 * nfft);
            assert!((h.foff - spec.chan_bw() / nfft as f64).abs() < 1e-12);
            assert_eq!(h.foff.signum(), obsbw.signum());
            let expected_fch1 = spec.obsfreq - obsbw / 2.0
                + (sel_start as f64 + 0.5) * spec.chan_bw()
                - (nfft / 2) as f64 * h.foff;
            assert!(
                (h.fch1 - expected_fch1).abs() < 1e-9,
                "fch1 {} vs {expected_fch1}",
                h.fch1
            );
            let want_ch = ((f - h.fch1) / h.foff).round() as usize;
            assert!(((f - h.fch1) / h.foff - want_ch as f64).abs() < 1e-6);
            let spectrum: Vec<f32> = (0..h.nchans as usize)
                .map(|ch| (0..fb.nsamples()).map(|t| fb.at(t, 0, ch)).sum())
                .collect();
            let peak = argmax(&spectrum);
            assert_eq!(peak, want_ch, "OBSBW {obsbw}, tone {f} MHz");
            // Exactly on a bin: everything else is noise, far below.
            let second = spectrum
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != peak)
                .map(|(_, v)| *v)
                .fold(0.0f32, f32::max);
            assert!(
                spectrum[peak] > 50.0 * second,
                "tone not clean: {} vs {second}",
                spectrum[peak]
            );
            assert!((r.plan.products[0].frequency(peak) - f).abs() < 1e-9);
        }
    }
}

#[test]
fn header_times_agree_with_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "time");
    spec.ntime = 100;
    spec.overlap = 36;
    spec.blocks_per_file = 6;
    spec.stt_imjd = 59123;
    spec.stt_smjd = 3600;
    spec.stt_offs = 0.125;
    let out = dir.path().join("out");
    let sel = Selection {
        skip_blocks: 2,
        ..Selection::default()
    };
    let r = gen_and_run(&spec, &[product(16, 3, Detection::TotalPower)], sel, &out);
    let fb = Filterbank::read(&out.join("time.0.fil")).unwrap();
    let h = &fb.header;
    let tbin = spec.tbin();
    assert!((h.tsamp - tbin * 16.0 * 3.0).abs() < 1e-18);
    // Two skipped blocks of 100 − 36 = 64 new samples each.
    let want = 59123.0 + (3600.0 + 0.125 + 2.0 * 64.0 * tbin) / 86400.0;
    assert!(
        (h.tstart - want).abs() * 86400.0 < 1e-6,
        "tstart {} vs {want}",
        h.tstart
    );
    // 4 blocks × 64 samples = 256 = 5 integrations of 48, 16 left over.
    assert_eq!(r.plan.samples, 256);
    assert_eq!(fb.nsamples(), 5);
    assert_eq!(r.plan.products[0].dropped_samples, 16);
    assert_eq!(h.source_name, "SYNTH");
    assert_eq!(h.rawdatafile, "time.0000.raw");
    assert_eq!(h.telescope_id, 6);
    assert!((h.src_raj - 123456.78).abs() < 1e-6);
    assert!((h.src_dej - 123456.78).abs() < 1e-6);
    assert_eq!(
        (h.nbits, h.nifs, h.data_type, h.ibeam, h.nbeams),
        (32, 1, 1, 0, 1)
    );
}

#[test]
fn multi_antenna_outputs_are_named_and_numbered() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = tiny(dir.path(), "multi");
    spec.nants = 2;
    let out = dir.path().join("out");
    let r = gen_and_run(
        &spec,
        &[product(8, 2, Detection::Stokes)],
        Selection::default(),
        &out,
    );
    let names: Vec<String> = r
        .outputs
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["multi.ant0.0.fil", "multi.ant1.0.fil"]);
    let h1 = Filterbank::read(&out.join("multi.ant1.0.fil"))
        .unwrap()
        .header;
    assert_eq!((h1.ibeam, h1.nbeams, h1.nifs), (1, 2, 4));
}
