//! Round trips: generated GUPPI parses back to the same header and samples (NBITS 4, 8, 16,
//! DIRECTIO on and off, OVERLAP, NPOL 1/2/4), and filterbank headers parse back to the values
//! written.

mod common;

use common::*;
use num_complex::Complex32;
use proptest::prelude::*;
use spectrometer::filterbank::{Filterbank, FilterbankHeader};
use spectrometer::generate::{generate, Tone};
use spectrometer::scan::{BlockReader, Scan, SlotKind};

#[test]
fn guppi_round_trip_every_geometry() {
    for nbits in [4usize, 8, 16] {
        for directio in [false, true] {
            for (overlap, npol) in [(0usize, 4usize), (8, 2), (5, 1)] {
                let dir = tempfile::tempdir().unwrap();
                let mut spec = tiny(dir.path(), "rt");
                spec.nbits = nbits;
                spec.directio = directio;
                spec.overlap = overlap;
                spec.npol = npol;
                spec.nants = 2;
                spec.nchan = 3;
                spec.ntime = 40;
                spec.blocks_per_file = 3;
                spec.files = 2;
                spec.noise = if nbits == 4 { 2.5 } else { 30.0 };
                spec.tones = vec![Tone::new(1401.0, 3.0)];
                let what =
                    format!("NBITS {nbits} DIRECTIO {directio} OVERLAP {overlap} NPOL {npol}");
                let rep = generate(&spec).unwrap();
                assert_eq!(rep.files.len(), 2);
                let scan = Scan::open(&dir.path().join("rt")).unwrap();
                let g = scan.geometry;
                assert_eq!(
                    (
                        g.nbits,
                        g.directio,
                        g.overlap,
                        g.npol,
                        g.nants,
                        g.nchan_per_ant,
                        g.ntime
                    ),
                    (
                        nbits,
                        directio,
                        overlap,
                        if npol == 1 { 1 } else { 2 },
                        2,
                        3,
                        40
                    ),
                    "{what}"
                );
                assert_eq!(g.blocsize, spec.blocsize());
                assert_eq!(scan.slots.len(), 6);
                assert!(
                    scan.gaps.is_empty() && scan.truncations.is_empty(),
                    "{what}"
                );
                // Every card of the generated header, unknown keys included, parses back.
                assert_eq!(scan.header, spec.header(0), "{what}");
                assert_eq!(scan.header.opt_str("DATATYPE").as_deref(), Some("FLOAT"));
                if directio {
                    for s in &scan.slots {
                        let SlotKind::Data { offset, .. } = s else {
                            panic!()
                        };
                        assert_eq!(offset % 512, 0, "{what}: data not 512-aligned");
                    }
                }
                let reader = BlockReader::spawn(&scan, 0, vec![vec![0u8; g.blocsize]; 2]);
                let mut blocks = 0;
                let mut prev_tail: Option<Vec<Complex32>> = None;
                while let Some(b) = reader.next_block() {
                    let b = b.unwrap();
                    let n = b.seq as usize;
                    for a in 0..2 {
                        for c in 0..3 {
                            for pol in 0..g.npol {
                                let mut got = vec![Complex32::default(); g.ntime];
                                g.decode(&b.buf, a * 3 + c, pol, 0, &mut got);
                                for (j, v) in got.iter().enumerate() {
                                    let t = (n * (40 - overlap) + j) as u64;
                                    let (re, im) = spec.quantized(a, c, pol, t);
                                    assert_eq!(
                                        (v.re, v.im),
                                        (re, im),
                                        "{what}: block {n} a{a} c{c} p{pol} t{j}"
                                    );
                                }
                                if a == 1 && c == 2 && pol == 0 {
                                    // The repeated samples really repeat.
                                    if let Some(tail) = &prev_tail {
                                        assert_eq!(&got[..overlap], &tail[..], "{what}");
                                    }
                                    prev_tail = Some(got[40 - overlap..].to_vec());
                                }
                            }
                        }
                    }
                    reader.recycle(b.buf);
                    blocks += 1;
                }
                assert_eq!(blocks, 6, "{what}");
                let stats = reader.finish();
                assert_eq!(stats.bytes_read, 6 * g.blocsize as u64);
            }
        }
    }
}

fn header_strategy() -> impl Strategy<Value = FilterbankHeader> {
    (
        (
            any::<i32>(),
            any::<i32>(),
            "[ -~]{0,40}",
            "[a-zA-Z0-9_+-]{0,20}",
        ),
        (
            -240000.0f64..240000.0,
            -900000.0f64..900000.0,
            40000.0f64..70000.0,
            1e-9f64..10.0,
        ),
        (
            -1e5f64..1e5,
            -100.0f64..100.0,
            1i32..1 << 24,
            1i32..5,
            0i32..64,
            1i32..64,
        ),
    )
        .prop_map(
            |(
                (tel, mach, raw, src),
                (ra, dec, tstart, tsamp),
                (fch1, foff, nchans, nifs, ibeam, nbeams),
            )| {
                FilterbankHeader {
                    telescope_id: tel,
                    machine_id: mach,
                    data_type: 1,
                    rawdatafile: raw,
                    source_name: src,
                    src_raj: ra,
                    src_dej: dec,
                    tstart,
                    tsamp,
                    fch1,
                    foff,
                    nchans,
                    nifs,
                    nbits: 32,
                    ibeam,
                    nbeams,
                }
            },
        )
}

proptest! {
    #[test]
    fn filterbank_header_round_trips(h in header_strategy()) {
        let bytes = h.to_bytes();
        let (back, len) = FilterbankHeader::parse(&bytes).unwrap();
        prop_assert_eq!(len, bytes.len());
        prop_assert_eq!(back, h);
    }
}

#[test]
fn filterbank_file_round_trip_through_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny(dir.path(), "fbrt");
    let out = dir.path().join("out");
    let r = gen_and_run(
        &spec,
        &[product(8, 2, spectrometer::plan::Detection::FullPol)],
        Default::default(),
        &out,
    );
    let fb = Filterbank::read(&r.outputs[0]).unwrap();
    let p = &r.plan.products[0];
    assert_eq!(fb.header.nchans as usize, p.nchans);
    assert_eq!(fb.header.nifs, 4);
    assert_eq!(fb.header.fch1, p.fch1);
    assert_eq!(fb.header.foff, p.foff);
    assert_eq!(fb.header.tsamp, p.tsamp);
    assert_eq!(fb.header.tstart, p.tstart);
    assert_eq!(fb.nsamples() as u64, p.integrations);
    assert_eq!(fb.data.len(), p.integrations as usize * 4 * p.nchans);
    // A header cut short is an error, not a silent default.
    let bytes = std::fs::read(&r.outputs[0]).unwrap();
    assert!(FilterbankHeader::parse(&bytes[..50]).is_err());
}
