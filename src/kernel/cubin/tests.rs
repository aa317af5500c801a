//! The `.nv.info` reader on hand-made ELF images (every malformation answers `None`, never a
//! panic), on a real NVRTC cubin (`params_sm90.cubin`) and random mutations of it, and — with
//! NVRTC on the host (`nvrtc_tests`, ignored without it) — on fresh cubins for several
//! architectures.

use super::{kernel_params, CubinParam};

/// The CUDA source of `params_sm90.cubin` (NVRTC 13.0.88, `-arch=sm_90 -default-device`, the
/// crate's `compile` options), without its generated `many` kernel ([`source`]).
const SOURCE: &str = r#"
struct S12 { int a, b, c; };
struct alignas(8) S40 { double d[5]; };
struct alignas(16) S16 { float x, y, z, w; int n; };
struct Big { char c[8000]; };
extern "C" __global__ void mixed(float* p, unsigned char a, unsigned short b, unsigned int c,
                                 unsigned long long d, double e, S12 s, S40 t, S16 u) {}
extern "C" __global__ void none() {}
extern "C" __global__ void grid(const __grid_constant__ S40 t, int* o) { o[0] = (int)t.d[1]; }
extern "C" __global__ void tail(int* p, char c) { p[0] = c; }
extern "C" __global__ void big(Big b, int* o) { o[0] = b.c[5]; }
__global__ void scale(float* p, float f) { p[0] *= f; }
template <typename T> __global__ void fill(T* p, T v) { p[0] = v; }
"#;

/// [`SOURCE`] and a kernel of 100 parameters (`char c<i>, double d<i>`, 50 times).
fn source() -> String {
    let params: Vec<String> = (0..50).map(|i| format!("char c{i}, double d{i}")).collect();
    format!(
        "{SOURCE}extern \"C\" __global__ void many({}) {{}}\n",
        params.join(", ")
    )
}

/// A cubin of [`source`], compiled by NVRTC 13.0.88 for `sm_90`.
const CUBIN: &[u8] = include_bytes!("params_sm90.cubin");

/// The C ABI layout of parameters of `(size, alignment)`: each at the end of the previous
/// one rounded up to its alignment.
fn c_layout(params: &[(u16, u16)]) -> Vec<CubinParam> {
    let mut end = 0u16;
    params
        .iter()
        .enumerate()
        .map(|(i, &(size, align))| {
            let offset = end.div_ceil(align) * align;
            end = offset + size;
            CubinParam {
                ordinal: i as u16,
                offset,
                size,
            }
        })
        .collect()
}

const PTR: (u16, u16) = (8, 8);
const S12: (u16, u16) = (12, 4);
const S40: (u16, u16) = (40, 8);
/// 20 bytes of members, aligned (and so sized) to 16.
const S16: (u16, u16) = (32, 16);

/// (symbol, the layout expected by the C ABI) of every kernel of [`source`] (`big`'s 8,008
/// bytes of parameters are described by `KPARAM_INFO_V2` records, the others' by
/// `KPARAM_INFO`).
fn expected() -> Vec<(&'static str, Vec<CubinParam>)> {
    let many: Vec<(u16, u16)> = (0..50).flat_map(|_| [(1, 1), (8, 8)]).collect();
    vec![
        (
            "mixed",
            c_layout(&[PTR, (1, 1), (2, 2), (4, 4), (8, 8), (8, 8), S12, S40, S16]),
        ),
        ("none", vec![]),
        ("grid", c_layout(&[S40, PTR])),
        ("tail", c_layout(&[PTR, (1, 1)])),
        ("big", c_layout(&[(8000, 1), PTR])),
        ("_Z5scalePff", c_layout(&[PTR, (4, 4)])),
        ("many", c_layout(&many)),
    ]
}

/// Checks what the reader promises of any answer: ordinals in order, increasing offsets, and
/// no more memory than the input.
fn check_answer(image: &[u8], symbol: &str) {
    if let Some(params) = kernel_params(image, symbol) {
        assert!(params.capacity() * std::mem::size_of::<CubinParam>() <= image.len());
        let mut end = 0;
        for (i, p) in params.iter().enumerate() {
            assert_eq!(usize::from(p.ordinal), i);
            assert!(p.size > 0 && p.offset >= end);
            end = p.offset + p.size;
        }
    }
}

// ---- hand-made images ----

const SHT_PROGBITS: u32 = 1;
const SHT_STRTAB: u32 = 3;
const SHT_CUDA_INFO: u32 = 0x7000_0000;

/// A little-endian ELF64 image: the 64-byte header, each section's data, `.shstrtab`, then
/// the section headers (a null one first, `.shstrtab` last).
fn elf(sections: &[(&str, u32, &[u8])]) -> Vec<u8> {
    let mut out = vec![0u8; 64];
    out[..8].copy_from_slice(b"\x7fELF\x02\x01\x01\x33");
    let mut names = vec![0u8];
    let mut headers = vec![[0u64; 4]]; // name, type, offset, size
    for (name, kind, data) in sections {
        headers.push([
            names.len() as u64,
            u64::from(*kind),
            out.len() as u64,
            data.len() as u64,
        ]);
        names.extend_from_slice(name.as_bytes());
        names.push(0);
        out.extend_from_slice(data);
    }
    let strtab_name = names.len() as u64;
    names.extend_from_slice(b".shstrtab\0");
    headers.push([
        strtab_name,
        u64::from(SHT_STRTAB),
        out.len() as u64,
        names.len() as u64,
    ]);
    out.extend_from_slice(&names);
    let shoff = out.len() as u64;
    for [name, kind, offset, size] in &headers {
        let mut h = [0u8; 64];
        h[0..4].copy_from_slice(&(*name as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(*kind as u32).to_le_bytes());
        h[0x18..0x20].copy_from_slice(&offset.to_le_bytes());
        h[0x20..0x28].copy_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&h);
    }
    out[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
    out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
    out[0x3c..0x3e].copy_from_slice(&(headers.len() as u16).to_le_bytes());
    out[0x3e..0x40].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
    out
}

/// The offset of section header `i` in an image made by [`elf`].
fn header_at(image: &[u8], i: usize) -> usize {
    u64::from_le_bytes(image[0x28..0x30].try_into().unwrap()) as usize + 64 * i
}

fn sval(attribute: u8, payload: &[u8]) -> Vec<u8> {
    let mut r = vec![0x04, attribute];
    r.extend_from_slice(&(payload.len() as u16).to_le_bytes());
    r.extend_from_slice(payload);
    r
}

fn hval(attribute: u8, value: u16) -> Vec<u8> {
    let mut r = vec![0x03, attribute];
    r.extend_from_slice(&value.to_le_bytes());
    r
}

fn kparam(ordinal: u16, offset: u16, size: u32) -> Vec<u8> {
    let mut p = 0u32.to_le_bytes().to_vec();
    p.extend_from_slice(&ordinal.to_le_bytes());
    p.extend_from_slice(&offset.to_le_bytes());
    p.extend_from_slice(&((size << 18) | 0x1f000).to_le_bytes());
    sval(0x17, &p)
}

fn total(size: u16) -> Vec<u8> {
    hval(0x19, size)
}

/// Records as NVRTC writes them for `(int* p, char c)`: other attributes around, parameters
/// last first, then the total.
fn tail_records() -> Vec<u8> {
    [
        sval(0x37, &[0x82, 0, 0, 0]),
        kparam(1, 8, 1),
        kparam(0, 0, 8),
        hval(0x50, 0),
        hval(0x1b, 0xff),
        vec![0x02, 0x4a, 0, 0], // a byte value
        vec![0x01, 0x42, 0, 0], // no value
        total(9),
        sval(0x36, &[8, 0, 0, 0]),
    ]
    .concat()
}

fn tail_params() -> Vec<CubinParam> {
    c_layout(&[PTR, (1, 1)])
}

fn info(records: &[u8]) -> Vec<u8> {
    elf(&[
        (".text.k", SHT_PROGBITS, &[0; 16]),
        (".nv.info.k", SHT_CUDA_INFO, records),
    ])
}

#[test]
fn reads_a_hand_made_cubin() {
    let image = info(&tail_records());
    assert_eq!(kernel_params(&image, "k"), Some(tail_params()));
    check_answer(&image, "k");
}

#[test]
fn no_parameter_records_and_no_total_is_no_parameters() {
    let records = [sval(0x37, &[0x82, 0, 0, 0]), hval(0x1b, 0xff)].concat();
    assert_eq!(kernel_params(&info(&records), "k"), Some(vec![]));
    assert_eq!(kernel_params(&info(&[]), "k"), Some(vec![]));
}

#[test]
fn the_section_name_must_match_exactly() {
    let image = info(&tail_records());
    for other in ["", "kk", "K", "k\0", ".nv.info.k"] {
        assert_eq!(kernel_params(&image, other), None, "{other:?}");
    }
}

#[test]
fn not_an_elf64_little_endian_cubin() {
    let good = info(&tail_records());
    assert_eq!(kernel_params(b"", "k"), None);
    assert_eq!(kernel_params(b"\x7fELF", "k"), None);
    assert_eq!(kernel_params(b"//\n// Generated by NVIDIA NVVM Compiler\n.version 9.0\n.target sm_90\n.visible .entry k(\n.param .u64 p\n)\n{ ret; }\n", "k"), None);
    for (at, value) in [(0, 0x7e), (3, b'G'), (4, 1), (5, 2), (6, 0)] {
        let mut image = good.clone();
        image[at] = value;
        assert_eq!(kernel_params(&image, "k"), None, "byte {at} = {value}");
    }
}

#[test]
fn every_truncation_answers_none() {
    let image = info(&tail_records());
    for len in 0..image.len() {
        assert_eq!(kernel_params(&image[..len], "k"), None, "{len} bytes");
    }
}

#[test]
fn bad_section_header_tables() {
    let good = info(&tail_records());
    let set = |at: usize, bytes: &[u8]| {
        let mut image = good.clone();
        image[at..at + bytes.len()].copy_from_slice(bytes);
        image
    };
    let cases = [
        (
            "table past the end",
            set(0x28, &(good.len() as u64).to_le_bytes()),
        ),
        ("table offset overflows", set(0x28, &u64::MAX.to_le_bytes())),
        ("entry size 40", set(0x3a, &40u16.to_le_bytes())),
        ("entry size 128", set(0x3a, &128u16.to_le_bytes())),
        ("no sections", set(0x3c, &0u16.to_le_bytes())),
        (
            "more sections than the file",
            set(0x3c, &u16::MAX.to_le_bytes()),
        ),
        ("names index past the table", set(0x3e, &4u16.to_le_bytes())),
        ("SHN_XINDEX", set(0x3e, &0xffffu16.to_le_bytes())),
    ];
    for (what, image) in cases {
        assert_eq!(kernel_params(&image, "k"), None, "{what}");
    }
}

#[test]
fn sections_out_of_bounds_or_overlapping() {
    let good = info(&tail_records());
    // Section 2 is `.nv.info.k`, 3 `.shstrtab`.
    let set = |section: usize, field: usize, value: u64| {
        let mut image = good.clone();
        let at = header_at(&image, section) + field;
        image[at..at + 8].copy_from_slice(&value.to_le_bytes());
        image
    };
    let len = good.len() as u64;
    let cases = [
        ("info past the end", set(2, 0x18, len)),
        ("info larger than the file", set(2, 0x20, len)),
        ("info offset + size overflows", set(2, 0x20, u64::MAX)),
        ("info offset overflows", set(2, 0x18, u64::MAX)),
        ("names past the end", set(3, 0x18, len)),
        ("names larger than the file", set(3, 0x20, u64::MAX - 3)),
        // Overlapping: the records are then the ELF header's bytes (format 0x7f).
        ("info over the ELF header", set(2, 0x18, 0)),
        // The records are the section header table's bytes.
        (
            "info over the header table",
            set(2, 0x18, header_at(&good, 0) as u64),
        ),
    ];
    for (what, image) in cases {
        assert_eq!(kernel_params(&image, "k"), None, "{what}");
        check_answer(&image, "k");
    }
    // Names overlapping the records: the lookup fails (no `.nv.info.k` there), no panic.
    let info_offset = u64::from_le_bytes(
        good[header_at(&good, 2) + 0x18..header_at(&good, 2) + 0x20]
            .try_into()
            .unwrap(),
    );
    assert_eq!(kernel_params(&set(3, 0x18, info_offset), "k"), None);
}

#[test]
fn bad_section_names() {
    let good = info(&tail_records());
    let set_u32 = |section: usize, field: usize, value: u32| {
        let mut image = good.clone();
        let at = header_at(&image, section) + field;
        image[at..at + 4].copy_from_slice(&value.to_le_bytes());
        image
    };
    // A name offset past the names, one whose name runs off their end.
    assert_eq!(kernel_params(&set_u32(1, 0, u32::MAX), "k"), None);
    let names_size = {
        let at = header_at(&good, 3) + 0x20;
        u64::from_le_bytes(good[at..at + 8].try_into().unwrap())
    };
    let mut unterminated = good.clone();
    let at = header_at(&good, 3) + 0x20;
    unterminated[at..at + 8].copy_from_slice(&(names_size - 1).to_le_bytes());
    assert_eq!(kernel_params(&unterminated, "k"), None);
    // The wrong section type, two sections of the name.
    assert_eq!(kernel_params(&set_u32(2, 4, SHT_PROGBITS), "k"), None);
    let two = elf(&[
        (".nv.info.k", SHT_CUDA_INFO, &tail_records()),
        (".nv.info.k", SHT_CUDA_INFO, &tail_records()),
    ]);
    assert_eq!(kernel_params(&two, "k"), None);
}

#[test]
fn bad_records() {
    let k = |o, s| kparam(o, if o == 0 { 0 } else { 8 }, s);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "unknown format",
            [tail_records(), vec![0x05, 0x17, 0, 0]].concat(),
        ),
        ("format 0", [vec![0, 0, 0, 0], tail_records()].concat()),
        (
            "half a header at the end",
            [tail_records(), vec![0x03, 0x50]].concat(),
        ),
        (
            "payload past the end",
            [tail_records(), vec![0x04, 0x36, 8, 0, 1, 2]].concat(),
        ),
        (
            "parameter record of 8 bytes",
            [sval(0x17, &[0; 8]), total(0)].concat(),
        ),
        (
            "parameter record of 16 bytes",
            [sval(0x17, &[0; 16]), total(0)].concat(),
        ),
        (
            "parameter record as a half value",
            [hval(0x17, 0), total(0)].concat(),
        ),
        (
            "total as a sized value",
            [k(0, 8), sval(0x19, &[8, 0, 0, 0])].concat(),
        ),
        ("two totals", [k(0, 8), total(8), total(9)].concat()),
        ("no total", k(0, 8)),
        ("a total but no parameters", total(8008)),
        (
            "total short of the last parameter",
            [k(0, 8), k(1, 1), total(8)].concat(),
        ),
        (
            "total past the last parameter",
            [k(0, 8), k(1, 1), total(16)].concat(),
        ),
        ("ordinals from 1", [k(1, 1), total(9)].concat()),
        (
            "an ordinal missing",
            [kparam(2, 8, 1), k(0, 8), total(9)].concat(),
        ),
        ("an ordinal twice", [k(0, 8), k(0, 8), total(8)].concat()),
        ("size 0", [k(1, 0), k(0, 8), total(8)].concat()),
        (
            "overlapping parameters",
            [kparam(1, 4, 4), k(0, 8), total(8)].concat(),
        ),
        (
            "offsets out of order",
            [kparam(0, 8, 8), kparam(1, 0, 8), total(16)].concat(),
        ),
    ];
    for (what, records) in cases {
        assert_eq!(kernel_params(&info(&records), "k"), None, "{what}");
    }
    // A total of 0 with no parameters is no parameters; a repeated equal total is one.
    assert_eq!(kernel_params(&info(&total(0)), "k"), Some(vec![]));
    let repeated = [k(1, 1), k(0, 8), total(9), total(9)].concat();
    assert_eq!(kernel_params(&info(&repeated), "k"), Some(tail_params()));
}

fn kparam_v2(ordinal: u16, offset: u16, size: u16, flags: u16) -> Vec<u8> {
    let mut p = 0u32.to_le_bytes().to_vec();
    for v in [ordinal, offset, size, flags] {
        p.extend_from_slice(&v.to_le_bytes());
    }
    sval(0x45, &p)
}

#[test]
fn reads_version_2_records() {
    // As NVRTC writes them for `(int* o, Big b, unsigned char z)` with `Big` 32,000 bytes
    // (`sm_100`: the pointer flagged 0x0500).
    let records = [
        sval(0x37, &[0x82, 0, 0, 0]),
        kparam_v2(2, 32008, 1, 0),
        kparam_v2(1, 8, 32000, 0),
        kparam_v2(0, 0, 8, 0x0500),
        vec![0x02, 0x4a, 0, 0],
        total(32009),
    ]
    .concat();
    assert_eq!(
        kernel_params(&info(&records), "k"),
        Some(c_layout(&[PTR, (32000, 1), (1, 1)]))
    );
    // One parameter described by both versions: its ordinal twice.
    let both = [kparam(0, 0, 8), kparam_v2(0, 0, 8, 0), total(8)].concat();
    assert_eq!(kernel_params(&info(&both), "k"), None);
    let short = [sval(0x45, &[0; 10]), total(0)].concat();
    assert_eq!(kernel_params(&info(&short), "k"), None);
}

#[test]
fn the_largest_size_field() {
    // 14 bits: 16,383 bytes; the other bits of the word are not the size.
    let mut p = 0u32.to_le_bytes().to_vec();
    p.extend_from_slice(&0u16.to_le_bytes());
    p.extend_from_slice(&0u16.to_le_bytes());
    p.extend_from_slice(&0xffff_ffffu32.to_le_bytes());
    let records = [sval(0x17, &p), total(16383)].concat();
    assert_eq!(
        kernel_params(&info(&records), "k"),
        Some(vec![CubinParam {
            ordinal: 0,
            offset: 0,
            size: 16383
        }])
    );
}

// ---- a real cubin ----

#[test]
fn reads_an_nvrtc_cubin() {
    for (symbol, layout) in expected() {
        assert_eq!(kernel_params(CUBIN, symbol), Some(layout), "{symbol}");
        check_answer(CUBIN, symbol);
    }
    // Demangled names are not symbols; a kernel that is not there.
    assert_eq!(kernel_params(CUBIN, "scale"), None);
    assert_eq!(kernel_params(CUBIN, "missing"), None);
}

/// xorshift64*: a reproducible stream of pseudo-random numbers with no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn random_mutations_of_a_real_cubin_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let symbols: Vec<&str> = expected()
        .iter()
        .map(|(s, _)| *s)
        .chain(["missing"])
        .collect();
    // Where a mutation hurts most: the ELF header, the section header table, and (found
    // from the real image) the info sections.
    let shoff = u64::from_le_bytes(CUBIN[0x28..0x30].try_into().unwrap()) as usize;
    let mut image = CUBIN.to_vec();
    // The first rounds only under Miri (each takes a second or more there).
    for round in 0..if cfg!(miri) { 40 } else { 4000 } {
        image.clear();
        image.extend_from_slice(CUBIN);
        for _ in 0..1 + rng.below(8) {
            let at = match rng.below(4) {
                0 => rng.below(64),
                1 => shoff + rng.below(CUBIN.len() - shoff),
                _ => rng.below(CUBIN.len()),
            };
            image[at] = match rng.below(4) {
                0 => 0,
                1 => 0xff,
                _ => rng.next() as u8,
            };
        }
        let image = if round % 5 == 0 {
            &image[..rng.below(CUBIN.len())]
        } else {
            &image[..]
        };
        for symbol in &symbols {
            check_answer(image, symbol);
        }
    }
}

/// With NVRTC on the host (ignored without it; `.ci/run` installs NVRTC 13.0 from its wheel):
/// fresh cubins of [`source`] for several architectures, with `fill<T>` instantiated through
/// name expressions, describe the C ABI layout, and `sm_90`'s matches `params_sm90.cubin`.
mod nvrtc_tests {
    use super::*;
    use crate::kernel::{compile, CodeKind, CompileOptions};

    #[test]
    #[ignore = "needs NVRTC (libnvrtc.so.13); .ci/run installs it and runs this with --ignored"]
    fn cubin_parameter_layouts_are_the_c_abi() {
        let source = source();
        for arch in [(7, 5), (8, 0), (8, 9), (9, 0), (10, 0), (12, 0)] {
            let opts = CompileOptions {
                name: "cubin_params.cu".into(),
                arch: Some(arch),
                kind: CodeKind::Cubin,
                name_expressions: vec!["fill<double>".into(), "fill<S12>".into()],
                ..CompileOptions::default()
            };
            let c = compile(None, &source, &opts).expect("compiles");
            let mut want = expected();
            for (expr, layout) in [
                ("fill<double>", c_layout(&[PTR, (8, 8)])),
                ("fill<S12>", c_layout(&[PTR, S12])),
            ] {
                let symbol: &'static str = c.lowered_names[expr].clone().leak();
                want.push((symbol, layout));
            }
            for (symbol, layout) in want {
                let got = kernel_params(&c.image, symbol);
                assert_eq!(
                    got,
                    Some(layout.clone()),
                    "sm_{}{}: {symbol}",
                    arch.0,
                    arch.1
                );
                if arch == (9, 0) && !symbol.starts_with("_Z4fill") {
                    assert_eq!(kernel_params(CUBIN, symbol), got, "{symbol} vs the fixture");
                }
            }
        }
    }
}
