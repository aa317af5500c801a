//! The fixtures beside this file were made with CUDA 13.0's tools (NVRTC 13.0.88, `ptxas` and
//! `fatbinary` V13.0.88, from NVIDIA's `nvidia-cuda-nvrtc` and `nvidia-cuda-nvcc` wheels):
//! `kernels.cu` compiled to PTX for `compute_90`, that PTX assembled for `sm_90` and `sm_100`,
//! then
//!
//! - `default.fatbin`: `fatbinary --create=default.fatbin --image3=kind=elf,sm=90,file=k90.cubin
//!   --image3=kind=elf,sm=100,file=k100.cubin --image3=kind=ptx,sm=90,file=k.ptx` (the cubins
//!   stored as they are, the PTX zstd-compressed; the `sm_100` entry has a 112-byte header);
//! - `all.fatbin`: the `sm_90` cubin and the PTX with `-compress-all` (both compressed);
//! - `none.fatbin`: the same with `-compress=false` (neither);
//! - `ptx_only.fatbin`: the PTX alone;
//! - `mixed.fatbin`: the `sm_90` cubin of `kernels.cu` with the PTX of `other_scale.cu`, whose
//!   `scale` has two parameters where `kernels.cu`'s has four.

use super::{images, is_fatbin, FatbinImage, MAX_IMAGE};
use crate::kernel::module::described_params as layout_of;
use crate::kernel::ParamSource;
use proptest::prelude::*;

const DEFAULT: &[u8] = include_bytes!("default.fatbin");
const ALL: &[u8] = include_bytes!("all.fatbin");
const NONE: &[u8] = include_bytes!("none.fatbin");
const PTX_ONLY: &[u8] = include_bytes!("ptx_only.fatbin");
const MIXED: &[u8] = include_bytes!("mixed.fatbin");

/// `scale(float*, float, unsigned long long, int)`.
const SCALE: [(usize, usize); 4] = [(0, 8), (8, 4), (16, 8), (24, 4)];
/// `takes_struct(P, short, float*)`, `P` 16 bytes aligned to 8.
const TAKES_STRUCT: [(usize, usize); 3] = [(0, 16), (16, 2), (24, 8)];

fn kinds(images: &[FatbinImage]) -> Vec<(bool, u32)> {
    images.iter().map(|i| (i.elf, i.arch)).collect()
}

#[test]
fn every_image_is_read_and_decompressed() {
    let d = images(DEFAULT).expect("default.fatbin");
    assert_eq!(kinds(&d), [(true, 90), (true, 100), (false, 90)]);
    let n = images(NONE).expect("none.fatbin");
    let a = images(ALL).expect("all.fatbin");
    assert_eq!(kinds(&n), [(true, 90), (false, 90)]);
    assert_eq!(kinds(&a), [(true, 90), (false, 90)]);
    // The same cubin stored as it is and decompressed.
    assert_eq!(d[0].bytes, n[0].bytes);
    assert_eq!(a[0].bytes, n[0].bytes);
    assert!(a[0].bytes.starts_with(b"\x7fELF"));
    // The same PTX decompressed (the uncompressed one is padded with NULs to 8 bytes).
    let text = |b: &[u8]| b.split(|&c| c == 0).next().unwrap().to_vec();
    assert_eq!(text(&d[2].bytes), text(&n[1].bytes));
    assert_eq!(text(&a[1].bytes), text(&n[1].bytes));
    assert!(String::from_utf8(text(&a[1].bytes))
        .unwrap()
        .contains(".visible .entry scale("));
}

#[test]
fn a_fatbins_layouts_agree_with_its_images() {
    for (name, bytes) in [
        ("default", DEFAULT),
        ("all", ALL),
        ("none", NONE),
        ("ptx_only", PTX_ONLY),
    ] {
        for (kernel, want) in [("scale", &SCALE[..]), ("takes_struct", &TAKES_STRUCT[..])] {
            assert_eq!(
                layout_of(bytes, kernel),
                Some((want.to_vec(), ParamSource::Fatbin)),
                "{name}.fatbin, {kernel}"
            );
        }
        assert_eq!(layout_of(bytes, "missing"), None, "{name}.fatbin");
    }
}

/// CUDA loads one image of its choice, so a fatbin whose images describe a kernel
/// differently gives no layout (the kernel's parameters are then probed), while the kernel
/// they agree on still has one.
#[test]
fn images_that_disagree_give_no_layout() {
    assert_eq!(layout_of(MIXED, "scale"), None);
    // `takes_struct` is in the cubin only: not every image describes it.
    assert_eq!(layout_of(MIXED, "takes_struct"), None);
    assert_eq!(kinds(&images(MIXED).unwrap()), [(true, 90), (false, 90)]);
}

/// Offsets of fields in the first entry of `default.fatbin` (after the 16-byte container
/// header).
const ENTRY: usize = 16;

fn patched(bytes: &[u8], at: usize, value: &[u8]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    b[at..at + value.len()].copy_from_slice(value);
    b
}

#[test]
fn what_the_reader_cannot_read_is_refused_whole() {
    assert!(is_fatbin(DEFAULT) && !is_fatbin(b"\x7fELF") && !is_fatbin(&[]));
    // LZ4 (flags of the PTX entry of ptx_only.fatbin, the only entry).
    let lz4 = patched(PTX_ONLY, ENTRY + 40, &0x2011u64.to_le_bytes());
    assert_eq!(images(&lz4), None);
    assert_eq!(layout_of(&lz4, "scale"), None);
    // An unknown kind.
    assert_eq!(images(&patched(DEFAULT, ENTRY, &4u16.to_le_bytes())), None);
    // A decompressed size other than the announced one, or over the limit.
    let dsize = u64::from_le_bytes(PTX_ONLY[ENTRY + 56..ENTRY + 64].try_into().unwrap());
    for bad in [dsize - 1, dsize + 1, MAX_IMAGE + 1] {
        let b = patched(PTX_ONLY, ENTRY + 56, &bad.to_le_bytes());
        assert_eq!(images(&b), None, "decompressed size {bad} (really {dsize})");
    }
    // A corrupt zstd frame.
    assert_eq!(images(&patched(PTX_ONLY, ENTRY + 80, &[0, 0, 0, 0])), None);
    // An entry header too short to hold the flags, or running past the container.
    assert_eq!(
        images(&patched(DEFAULT, ENTRY + 4, &32u32.to_le_bytes())),
        None
    );
    assert_eq!(
        images(&patched(DEFAULT, ENTRY + 8, &u64::MAX.to_le_bytes())),
        None
    );
    // A container larger than the file.
    assert_eq!(images(&patched(DEFAULT, 8, &u64::MAX.to_le_bytes())), None);
    // Garbage after the last container; zero padding is fine.
    let mut garbage = DEFAULT.to_vec();
    garbage.extend_from_slice(&[0, 0, 7, 0]);
    assert_eq!(images(&garbage), None);
    let mut padded = DEFAULT.to_vec();
    padded.extend_from_slice(&[0; 8]);
    assert_eq!(images(&padded), images(DEFAULT));
    // Two containers, one after the other, are read in order.
    let two = [NONE, PTX_ONLY].concat();
    assert_eq!(
        kinds(&images(&two).unwrap()),
        [(true, 90), (false, 90), (false, 90)]
    );
    assert_eq!(
        layout_of(&two, "scale"),
        Some((SCALE.to_vec(), ParamSource::Fatbin))
    );
}

/// A fatbin of one uncompressed entry of `kind` holding `payload`.
fn one_entry(kind: u16, payload: &[u8]) -> Vec<u8> {
    let mut entry = vec![0u8; 64];
    entry[0..2].copy_from_slice(&kind.to_le_bytes());
    entry[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    entry[4..8].copy_from_slice(&64u32.to_le_bytes());
    entry[8..16].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    entry[28..32].copy_from_slice(&90u32.to_le_bytes());
    let mut b = 0xBA55_ED50u32.to_le_bytes().to_vec();
    b.extend_from_slice(&1u16.to_le_bytes());
    b.extend_from_slice(&16u16.to_le_bytes());
    b.extend_from_slice(&((entry.len() + payload.len()) as u64).to_le_bytes());
    b.extend_from_slice(&entry);
    b.extend_from_slice(payload);
    b
}

/// An image is read as the kind its entry says, and one that is itself a fatbin is not
/// opened: no recursion however deeply they nest (reading them recursively overflowed the
/// test thread's stack).
#[test]
#[cfg_attr(
    miri,
    ignore = "10,000 nested fatbins built by copying: gigabytes of copies under Miri"
)]
fn images_are_what_their_entries_say_and_never_fatbins() {
    let cubin = images(NONE).unwrap().remove(0).bytes;
    let ptx = images(NONE).unwrap().remove(1).bytes;
    assert_eq!(
        layout_of(&one_entry(2, &cubin), "scale"),
        Some((SCALE.to_vec(), ParamSource::Fatbin))
    );
    assert_eq!(
        layout_of(&one_entry(1, &ptx), "scale"),
        Some((SCALE.to_vec(), ParamSource::Fatbin))
    );
    // A cubin in a PTX entry, PTX in an ELF entry.
    assert_eq!(layout_of(&one_entry(1, &cubin), "scale"), None);
    assert_eq!(layout_of(&one_entry(2, &ptx), "scale"), None);
    // Fatbins nested 10,000 deep.
    let mut nested = NONE.to_vec();
    for _ in 0..10_000 {
        nested = one_entry(2, &nested);
    }
    assert!(images(&nested).is_some());
    assert_eq!(layout_of(&nested, "scale"), None);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "thousands of prefixes through the zstd decoder: hours under Miri"
)]
fn every_truncation_is_refused() {
    for end in 0..DEFAULT.len() {
        assert_eq!(images(&DEFAULT[..end]), None, "the first {end} bytes");
    }
    for end in 0..ALL.len() {
        assert_eq!(images(&ALL[..end]), None, "the first {end} bytes");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// Bytes changed anywhere: never a panic, and the layout, when there is one, is still
    /// the one every image agrees on.
    #[test]
    #[cfg_attr(miri, ignore = "2,000 cases through the zstd decoder: hours under Miri")]
    fn changed_bytes_never_panic(
        which in 0..3usize,
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut b = [DEFAULT, ALL, NONE][which].to_vec();
        for (i, v) in changes {
            let at = i.index(b.len());
            b[at] = v;
        }
        let _ = images(&b);
        if let Some((layout, source)) = layout_of(&b, "scale") {
            prop_assert_eq!(source, ParamSource::Fatbin);
            prop_assert!(layout.len() <= 64);
        }
    }
}
