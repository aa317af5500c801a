//! FBH5 files: written by [`Fbh5Writer`], read back by [`read_fbh5`] (and, in
//! `scripts/check_fbh5.py`, by blimpy).
#![cfg(feature = "fbh5")]

use spectrometer::fbh5::{
    bitshuffle_available, read_fbh5, Compression, Fbh5Writer, BITSHUFFLE_FILTER,
};
use spectrometer::filterbank::FilterbankHeader;
use spectrometer::Error;

fn header(nifs: i32, nchans: i32) -> FilterbankHeader {
    FilterbankHeader {
        telescope_id: 6,
        machine_id: 20,
        data_type: 1,
        rawdatafile: "blc00_guppi_59000_12345_VOYAGER-1_0001.0000.raw".into(),
        source_name: "VOYAGER-1".into(),
        src_raj: 171003.984,
        src_dej: -121058.8,
        tstart: 59_000.142_857_142_86,
        tsamp: 18.253611008,
        fch1: 8421.38671875,
        foff: -2.7939677238464355e-6,
        nchans,
        nifs,
        nbits: 32,
        ibeam: 0,
        nbeams: 1,
    }
}

/// Smooth, compressible spectra with a value that says where it is.
fn spectrum(t: usize, nifs: usize, nchans: usize) -> Vec<f32> {
    (0..nifs * nchans)
        .map(|i| (t * 1000 + i / nchans * 100) as f32 + (i % nchans) as f32 * 0.5)
        .collect()
}

fn write(
    path: &std::path::Path,
    nints: usize,
    nifs: usize,
    nchans: usize,
    compression: Compression,
) -> Vec<f32> {
    let h = header(nifs as i32, nchans as i32);
    let mut w = Fbh5Writer::create_with(path, &h, nints, compression).unwrap();
    let mut all = Vec::new();
    for t in 0..nints {
        let s = spectrum(t, nifs, nchans);
        w.write_spectrum(&s).unwrap();
        all.extend(s);
    }
    w.finish().unwrap();
    all
}

#[test]
fn header_and_data_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.h5");
    let data = write(&path, 7, 4, 64, Compression::Auto);
    let (fb, info) = read_fbh5(&path).unwrap();
    let want = header(4, 64);
    assert_eq!(fb.data, data);
    assert_eq!(fb.nsamples(), 7);
    assert_eq!(info.version, "2.0");
    assert_eq!(info.bitshuffle, bitshuffle_available());
    // src_raj / src_dej go through decimal hours / degrees and back.
    assert!((fb.header.src_raj - want.src_raj).abs() < 1e-6);
    assert!((fb.header.src_dej - want.src_dej).abs() < 1e-6);
    let mut h = fb.header.clone();
    h.src_raj = want.src_raj;
    h.src_dej = want.src_dej;
    assert_eq!(h, want);
}

#[test]
fn spectra_spanning_several_chunks_and_a_partial_last_one() {
    // 2^19 channels × 2 IFs: one chunk row holds two spectra of one IF... the writer buffers
    // whole rows of chunks; 5 spectra leave a partial last band.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.h5");
    let data = write(&path, 5, 2, 1 << 19, Compression::Auto);
    let (fb, info) = read_fbh5(&path).unwrap();
    assert_eq!(info.chunk, Some(vec![2, 1, 1 << 19]));
    assert_eq!(fb.data.len(), data.len());
    assert!(fb.data == data, "data differ");
}

#[test]
fn uncompressed_when_asked_and_bitshuffle_when_available() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.h5");
    let data = write(&plain, 16, 1, 4096, Compression::None);
    let (fb, info) = read_fbh5(&plain).unwrap();
    assert!(!info.bitshuffle);
    assert_eq!(fb.data, data);

    let packed = dir.path().join("packed.h5");
    let h = header(1, 4096);
    match Fbh5Writer::create_with(&packed, &h, 16, Compression::Bitshuffle) {
        Ok(_) if !bitshuffle_available() => panic!("bitshuffle asked for and not available"),
        Ok(mut w) => {
            assert!(w.compressed());
            for t in 0..16 {
                w.write_spectrum(&spectrum(t, 1, 4096)).unwrap();
            }
            w.finish().unwrap();
            let (fb, info) = read_fbh5(&packed).unwrap();
            assert!(info.bitshuffle);
            assert_eq!(fb.data, data);
            let (a, b) = (
                std::fs::metadata(&plain).unwrap().len(),
                std::fs::metadata(&packed).unwrap().len(),
            );
            assert!(
                b < a / 2,
                "bitshuffle+LZ4 {b} bytes against {a} uncompressed"
            );
        }
        Err(e) => {
            assert!(!bitshuffle_available(), "{e}");
            let msg = e.to_string();
            assert!(
                msg.contains("packed.h5") && msg.contains("bitshuffle"),
                "{msg}"
            );
        }
    }
    // CI installs the plugin: there the compressed path must have run.
    if std::env::var_os("CUDAGRAPH_REQUIRE_BITSHUFFLE").is_some() {
        assert!(
            bitshuffle_available(),
            "HDF5 cannot load filter {BITSHUFFLE_FILTER}"
        );
    }
}

#[test]
fn wrong_counts_and_lengths_are_errors_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.h5");
    let h = header(2, 8);
    let mut w = Fbh5Writer::create(&path, &h, 3).unwrap();
    let e = w.write_spectrum(&[0.0; 15]).unwrap_err();
    assert!(matches!(e, Error::Fbh5 { .. }), "{e}");
    assert!(
        e.to_string().contains("short.h5") && e.to_string().contains("16"),
        "{e}"
    );
    w.write_spectrum(&[0.0; 16]).unwrap();
    let e = w.finish().unwrap_err();
    assert!(e.to_string().contains("1 spectra written"), "{e}");

    let mut w = Fbh5Writer::create(&path, &h, 1).unwrap();
    w.write_spectrum(&[0.0; 16]).unwrap();
    let e = w.write_spectrum(&[0.0; 16]).unwrap_err();
    assert!(e.to_string().contains("more than the 1 spectra"), "{e}");

    let mut bad = h.clone();
    bad.nbits = 8;
    let e = Fbh5Writer::create(&path, &bad, 1).unwrap_err();
    assert!(e.to_string().contains("nbits 8"), "{e}");
}

#[test]
fn a_file_that_is_not_fbh5_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("not.h5");
    std::fs::write(&path, b"not an HDF5 file").unwrap();
    let e = read_fbh5(&path).unwrap_err();
    assert!(e.to_string().contains("not.h5"), "{e}");
}

#[test]
fn no_spectra_is_a_valid_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.h5");
    let w = Fbh5Writer::create(&path, &header(1, 16), 0).unwrap();
    w.finish().unwrap();
    let (fb, _) = read_fbh5(&path).unwrap();
    assert!(fb.data.is_empty());
}
