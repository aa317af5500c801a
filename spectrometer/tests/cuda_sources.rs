//! The GPU engine's CUDA C compiles with NVRTC, checked on the host (NVRTC needs no GPU): the
//! kernels as a cubin. Ignored by a plain `cargo test`; `.ci/run` installs NVRTC and runs it
//! with `--ignored`.

use cudagraph::{compile, CodeKind, CompileOptions};

const DETECT: &str = include_str!("../src/cuda/detect.cu");

fn check(name: &str, source: &str, kind: CodeKind) -> Result<usize, String> {
    let opts = CompileOptions {
        name: name.into(),
        arch: Some((9, 0)),
        kind,
        ..CompileOptions::default()
    };
    compile(None, source, &opts)
        .map(|c| c.image.len())
        .map_err(|e| e.to_string())
}

#[test]
#[ignore = "needs NVRTC (libnvrtc.so.13); .ci/run installs it and runs this with --ignored"]
fn the_engines_cuda_sources_compile_with_nvrtc() {
    let results = [("detect.cu", check("detect.cu", DETECT, CodeKind::Cubin))];
    let failed: Vec<String> = results
        .iter()
        .filter_map(|(what, r)| r.as_ref().err().map(|e| format!("{what}: {e}")))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    for (what, r) in &results {
        assert!(*r.as_ref().unwrap() > 0, "{what}: empty image");
    }
}
