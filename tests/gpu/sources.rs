//! The suite's CUDA sources compile with NVRTC, on the host (no GPU needed): a broken test
//! kernel shows up in CI instead of on the GPU machine.

use cudagraph::{compile, CodeKind, CompileOptions};

use crate::common::KERNELS;

register!(nvrtc "sources::compile_with_nvrtc" => compile_with_nvrtc);
fn compile_with_nvrtc() -> anyhow::Result<()> {
    // Device-side work needs the device runtime's header, and the launchers relocatable code
    // (their link with libcudadevrt needs a device: `CodeKind::DeviceRuntime`, on the GPU).
    let updaters = format!(
        "{}{}",
        cudagraph::DEVICE_UPDATE_INCLUDE,
        crate::device_side::UPDATERS
    );
    let launchers = format!(
        "{}{}",
        cudagraph::DEVICE_UPDATE_INCLUDE,
        crate::device_side::LAUNCHERS
    );
    let sources = [
        ("common::KERNELS", KERNELS, CodeKind::Cubin),
        (
            "attributes::SOURCE",
            crate::attributes::SOURCE,
            CodeKind::Cubin,
        ),
        (
            "memory_nodes::SOURCE",
            crate::memory_nodes::SOURCE,
            CodeKind::Cubin,
        ),
        ("infer::SOURCE", crate::infer::SOURCE, CodeKind::Cubin),
        ("device_side::UPDATERS", updaters.as_str(), CodeKind::Cubin),
        (
            "device_side::LAUNCHERS",
            launchers.as_str(),
            CodeKind::Cubin,
        ),
        // A custom FFT callback: as cuFFT links it (LTO-IR) and as the unfused form's
        // conversion kernel compiles it (ordinary device code).
        (
            "fft::CUSTOM_I8",
            crate::fft_forms::CUSTOM_I8,
            CodeKind::LtoIr,
        ),
        (
            "fft::CUSTOM_I8",
            crate::fft_forms::CUSTOM_I8,
            CodeKind::Cubin,
        ),
    ];
    let mut failed = Vec::new();
    for (name, source, kind) in sources {
        let opts = CompileOptions {
            name: format!("{name}.cu"),
            arch: Some((9, 0)),
            kind,
            // Relocatable: their calls into the device runtime may be linked on the GPU.
            options: if name.starts_with("device_side::") {
                vec!["-rdc=true".into()]
            } else {
                Vec::new()
            },
            ..CompileOptions::default()
        };
        match compile(None, source, &opts) {
            Ok(c) => anyhow::ensure!(!c.image.is_empty(), "{name}: empty image"),
            Err(e) => failed.push(format!("{name} ({kind:?}): {e}")),
        }
    }
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("\n"));
    Ok(())
}
