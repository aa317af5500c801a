//! Every CUDA source the FFT code compiles at run time compiles with NVRTC, checked on the
//! host: NVRTC needs no GPU, so this runs where the GPU suite cannot (CI installs NVRTC from
//! its Python wheel; `.ci/run`). Ignored by a plain `cargo test`; run with
//! `cargo test --lib nvrtc -- --ignored` where `libnvrtc.so.13` can be loaded.

use super::handle::{convert_source, load_cb, store_cb, SETTER_SRC};
use super::{CustomCallback, FftType, LoadCallback, StoreCallback};
use crate::kernel::{compile, CodeKind, CompileOptions};

/// The architecture the sources are checked for (the H200's).
const ARCH: (u32, u32) = (9, 0);

/// A custom callback of the shape users write (C++ linkage, as cuFFT's LTO callbacks need).
fn custom() -> CustomCallback {
    CustomCallback {
        source: r#"
struct user_params { float gain; };
__device__ float2 user_load(void* dataIn, unsigned long long offset, void* info, void* smem) {
    const user_params* p = (const user_params*)info;
    float2 v = ((const float2*)dataIn)[offset];
    return make_float2(v.x * p->gain, v.y * p->gain);
}"#
        .into(),
        function: "user_load".into(),
        params_size: 4,
        elem_bytes: 8,
    }
}

/// (name, source, kind) of every source the FFT code compiles: the parameter setter, every
/// built-in load and store callback (LTO-IR, as for cuFFT), and every conversion kernel of
/// the unfused form (a custom callback's included).
fn sources() -> Vec<(String, String, CodeKind)> {
    let mut v = vec![(
        "cudagraph_fft_set_params.cu".to_string(),
        SETTER_SRC.to_string(),
        CodeKind::Cubin,
    )];
    let loads = [
        LoadCallback::ComplexI8,
        LoadCallback::ComplexI16,
        LoadCallback::RealI8,
        LoadCallback::ComplexF32,
        LoadCallback::Custom(custom()),
    ];
    for cb in &loads {
        let (sym, src) = load_cb(cb);
        v.push((format!("{sym}.cu"), src, CodeKind::LtoIr));
        let kind = if matches!(cb, LoadCallback::RealI8) {
            FftType::R2C
        } else {
            FftType::C2C
        };
        let (name, src) = convert_source(cb, kind);
        v.push((format!("{name}.cu"), src, CodeKind::Cubin));
    }
    for (cb, kind) in [
        (StoreCallback::Scale, FftType::C2C),
        (StoreCallback::Scale, FftType::C2R),
        (StoreCallback::Power, FftType::C2C),
    ] {
        let (sym, src) = store_cb(&cb, kind);
        v.push((format!("{sym}.cu"), src, CodeKind::LtoIr));
    }
    v
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so.13); .ci/run installs it and runs this with --ignored"]
fn every_runtime_source_compiles_with_nvrtc() {
    let mut failures = Vec::new();
    let all = sources();
    for (name, source, kind) in &all {
        let opts = CompileOptions {
            name: name.clone(),
            arch: Some(ARCH),
            kind: *kind,
            ..CompileOptions::default()
        };
        match compile(None, source, &opts) {
            Ok(c) => assert!(!c.image.is_empty(), "{name}: empty image"),
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(all.len(), 1 + 2 * 5 + 3, "every source is listed");
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so.13); .ci/run installs it and runs this with --ignored"]
fn a_broken_source_is_reported_with_the_compiler_log() {
    let opts = CompileOptions {
        name: "broken.cu".into(),
        arch: Some(ARCH),
        kind: CodeKind::LtoIr,
        ..CompileOptions::default()
    };
    let e = compile(None, "__device__ int f() { return undefined_name; }", &opts).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("broken.cu") && text.contains("undefined_name"),
        "{text}"
    );
}
