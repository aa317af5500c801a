//! Compiling CUDA C++ with NVRTC: [`compile`], its options and output, the architecture
//! picked, the toolkit's include directory, and the on-disk cache (`crate::cache`).

use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::nvrtc as nv;
use crate::sys;

/// What NVRTC produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeKind {
    /// Machine code for the device's architecture (`-arch=sm_XX`), loadable as a module.
    #[default]
    Cubin,
    /// LTO-IR (`-dlto -rdc=true -arch=compute_XX`), for cuFFT's LTO callbacks.
    LtoIr,
    /// Machine code that may call the device runtime: relocatable PTX (`-rdc=true
    /// -arch=compute_XX`) linked with the toolkit's `libcudadevrt.a` by the driver's JIT linker
    /// into a cubin, loadable as a module. For kernels that launch graphs from the device
    /// (`cudaGraphLaunch`, see [`DeviceGraph`](crate::DeviceGraph)) or use dynamic parallelism.
    /// Needs a device (the linker runs in its context) and the toolkit's library
    /// ([`cudadevrt_path`]).
    DeviceRuntime,
}

/// Options for [`compile`].
#[derive(Debug, Clone)]
pub struct CompileOptions {
    /// The program's name in error messages.
    pub name: String,
    /// Extra NVRTC options, e.g. `-DN=4`, `--use_fast_math`.
    pub options: Vec<String>,
    /// Directories searched by `#include`. The CUDA toolkit's include directory is added
    /// when it exists (`$CUDA_PATH/include`, `$CUDA_HOME/include`, `/usr/local/cuda/include`).
    pub include_paths: Vec<PathBuf>,
    /// C++ names (e.g. `"scale<float>"`) whose mangled names
    /// [`Module::kernel`](super::Module::kernel) should find. Kernels declared `extern "C"` need
    /// none.
    pub name_expressions: Vec<String>,
    /// Target compute capability `(major, minor)`; `None` uses the device's (or the newest
    /// NVRTC supports that is not newer).
    pub arch: Option<(u32, u32)>,
    /// What to produce.
    pub kind: CodeKind,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            name: "cudagraph.cu".into(),
            options: Vec::new(),
            include_paths: Vec::new(),
            name_expressions: Vec::new(),
            arch: None,
            kind: CodeKind::Cubin,
        }
    }
}

/// The output of [`compile`].
#[derive(Debug, Clone)]
pub struct Compiled {
    /// The cubin or LTO-IR image.
    pub image: Vec<u8>,
    /// The compiler's log (warnings), possibly empty.
    pub log: String,
    /// Mangled names of the name expressions.
    pub lowered_names: HashMap<String, String>,
    /// Whether the image came from the on-disk cache instead of NVRTC (see [`compile`]).
    pub cached: bool,
}

/// The toolkit include directory, if one is installed.
pub(crate) fn toolkit_include() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = ["CUDA_PATH", "CUDA_HOME"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(|d| PathBuf::from(d).join("include")))
        .collect();
    dirs.push(PathBuf::from("/usr/local/cuda/include"));
    dirs.into_iter()
        .find(|d| d.join("cuda_runtime_api.h").exists())
}

/// Where `libcudadevrt.a` is looked for, under the CUDA toolkit's root (the directory above
/// the include directory `compile` uses).
const DEVRT_DIRS: [&str; 4] = [
    "lib64",
    "lib",
    "targets/x86_64-linux/lib",
    "targets/sbsa-linux/lib",
];

/// The device runtime library of the CUDA toolkit, if one is installed (`$CUDA_PATH`,
/// `$CUDA_HOME`, `/usr/local/cuda`, as for the include directory).
pub fn cudadevrt_path() -> Option<PathBuf> {
    devrt_under(toolkit_include()?.parent()?)
}

/// `libcudadevrt.a` in the first of [`DEVRT_DIRS`] under `root` that has it.
pub(crate) fn devrt_under(root: &std::path::Path) -> Option<PathBuf> {
    DEVRT_DIRS
        .iter()
        .map(|d| root.join(d).join("libcudadevrt.a"))
        .find(|p| p.is_file())
}

/// The device runtime library, or the error saying where it was looked for.
pub(crate) fn cudadevrt() -> Result<PathBuf> {
    cudadevrt_path().ok_or_else(|| Error::BadOptions {
        what: "CodeKind::DeviceRuntime",
        problem: format!(
            "linking with the device runtime needs libcudadevrt.a, found in none of {} under \
             the CUDA toolkit (set CUDA_PATH to a CUDA 13 toolkit)",
            DEVRT_DIRS.join(", ")
        ),
    })
}

/// The NVRTC version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    // SAFETY: plain query.
    unsafe { nv::version() }
}

/// Picks the architecture: the wanted one if NVRTC supports it, else the newest it supports
/// that is not newer.
fn pick_arch(want: (u32, u32)) -> Result<u32> {
    let want = want.0 * 10 + want.1;
    // SAFETY: plain query.
    let supported = unsafe { nv::supported_archs()? };
    supported
        .iter()
        .map(|&a| a as u32)
        .filter(|&a| a <= want)
        .max()
        .ok_or_else(|| {
            Error::Invalid(format!(
                "NVRTC supports none of the architectures up to sm_{want} (it has {supported:?})"
            ))
        })
}

/// Compiles CUDA C++ `source` with NVRTC for `device` (or `options.arch`).
///
/// The output is cached on disk: a second run of a program finds
/// its kernels and callbacks there instead of compiling them again ([`Compiled::cached`]).
/// The cache is `$CUDAGRAPH_CACHE_DIR`, else `$XDG_CACHE_HOME/cudagraph`, else
/// `$HOME/.cache/cudagraph`; `CUDAGRAPH_CACHE_DIR=off` turns it off. Entries are keyed by the
/// NVRTC version, the name, every option (target architecture and include directories
/// included), the name expressions and the source; headers reached through `#include` are not
/// part of the key, so clear the cache (or change an option) after editing one of your own.
///
/// A compile error is [`Error::Compile`] with NVRTC's log.
pub fn compile(
    device: Option<&Device>,
    source: &str,
    options: &CompileOptions,
) -> Result<Compiled> {
    let cc = match (options.arch, device) {
        (Some(a), _) => a,
        (None, Some(d)) => d.limits().compute_capability,
        (None, None) => {
            return Err(Error::BadOptions {
                what: "compile",
                problem: "give a device or CompileOptions::arch".into(),
            })
        }
    };
    // The device runtime to link with, and the device whose context links (DeviceRuntime).
    let devrt = match (options.kind, device) {
        (CodeKind::DeviceRuntime, Some(d)) => Some((d, cudadevrt()?)),
        (CodeKind::DeviceRuntime, None) => {
            return Err(Error::BadOptions {
                what: "compile",
                problem: "CodeKind::DeviceRuntime links in a device's context: give a device"
                    .into(),
            })
        }
        _ => None,
    };
    let arch = pick_arch(cc)?;
    let src = CString::new(source).map_err(|_| Error::Nul {
        what: "the kernel source",
    })?;
    let name = CString::new(options.name.as_str()).map_err(|_| Error::Nul {
        what: "the program name",
    })?;
    let mut opts: Vec<CString> = Vec::new();
    let mut push = |s: String| -> Result<()> {
        opts.push(CString::new(s).map_err(|_| Error::Nul {
            what: "a compile option",
        })?);
        Ok(())
    };
    match options.kind {
        CodeKind::Cubin => push(format!("-arch=sm_{arch}"))?,
        CodeKind::LtoIr => {
            push(format!("-arch=compute_{arch}"))?;
            push("-dlto".into())?;
            push("-rdc=true".into())?;
        }
        CodeKind::DeviceRuntime => {
            push(format!("-arch=compute_{arch}"))?;
            push("-rdc=true".into())?;
        }
    }
    push("-default-device".into())?;
    for o in &options.options {
        push(o.clone())?;
    }
    for p in options
        .include_paths
        .iter()
        .cloned()
        .chain(toolkit_include())
    {
        push(format!("-I{}", p.display()))?;
    }

    // The on-disk cache, keyed by everything that determines the output.
    let cache_dir = crate::cache::dir();
    let key = cache_dir.as_ref().and_then(|_| {
        let (major, minor) = nvrtc_version().ok()?;
        // Linked output also depends on the device runtime linked in.
        let linked = devrt
            .as_ref()
            .map(|(_, p)| format!("\nlinked with {}", p.display()))
            .unwrap_or_default();
        Some(format!(
            "nvrtc {major}.{minor}\nname {}\noptions {:?}\nexpressions {:?}{linked}\nsource\n{source}",
            options.name, opts, options.name_expressions
        ))
    });
    if let (Some(dir), Some(key)) = (&cache_dir, &key) {
        if let Some(e) = crate::cache::load(dir, key) {
            return Ok(Compiled {
                image: e.image,
                log: e.log,
                lowered_names: e.lowered_names,
                cached: true,
            });
        }
    }

    // SAFETY: the program is destroyed by the guard below on every path.
    let prog = unsafe { nv::create_program(&src, &name)? };
    struct Guard(sys::nvrtcProgram);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: the program is live and used no more. A failure to free a compiler
            // object leaks host memory only and there is no device to report it to.
            let _ = unsafe { nv::destroy_program(self.0) };
        }
    }
    let guard = Guard(prog);
    let exprs: Vec<CString> = options
        .name_expressions
        .iter()
        .map(|e| CString::new(e.as_str()))
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::Nul {
            what: "a name expression",
        })?;
    for e in &exprs {
        // SAFETY: the program is live and not compiled yet.
        unsafe { nv::add_name_expression(guard.0, e)? };
    }
    // SAFETY: the program is live.
    let status = unsafe { nv::compile_program(guard.0, &opts)? };
    // SAFETY: the program is live.
    let log = unsafe { nv::program_log(guard.0)? };
    if status == sys::nvrtcResult::NVRTC_ERROR_COMPILATION {
        return Err(Error::Compile {
            program: options.name.clone(),
            log,
        });
    }
    nv::check("nvrtcCompileProgram", status)?;
    let mut lowered_names = HashMap::new();
    for (e, c) in options.name_expressions.iter().zip(&exprs) {
        // SAFETY: compiled, and the expression was added before compiling.
        lowered_names.insert(e.clone(), unsafe { nv::lowered_name(guard.0, c)? });
    }
    // SAFETY: the program is live and compiled for the requested kind.
    let image = unsafe {
        match options.kind {
            CodeKind::Cubin => nv::cubin(guard.0)?,
            CodeKind::LtoIr => nv::lto_ir(guard.0)?,
            CodeKind::DeviceRuntime => nv::ptx(guard.0)?,
        }
    };
    let image = match &devrt {
        Some((d, path)) => super::link::with_device_runtime(d, &image, &options.name, path)?,
        None => image,
    };
    let compiled = Compiled {
        image,
        log,
        lowered_names,
        cached: false,
    };
    if let (Some(dir), Some(key)) = (&cache_dir, &key) {
        crate::cache::store(
            dir,
            key,
            &crate::cache::Entry {
                image: compiled.image.clone(),
                log: compiled.log.clone(),
                lowered_names: compiled.lowered_names.clone(),
            },
        );
    }
    Ok(compiled)
}
