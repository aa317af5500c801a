//! Run-time loading of the CUDA libraries.
//!
//! Nothing is linked at build time. Each library is opened once per process, the first time a
//! call needs it, from a list of candidate paths ([`candidates`]); the outcome, success or a typed
//! [`Error::LibraryNotFound`], is cached. Every symbol is looked up when the library is opened,
//! and a symbol that is missing is stored as such: only the call that needs it fails, with
//! [`Error::MissingSymbol`].
//!
//! NCCL ([`nccl`]) is looked for in more places ([`nccl_candidates`]), and it is opened only
//! when `NCCL_NVLS_ENABLE` is set ([`nccl_nvls_setting`]; [`set_nccl_nvls_off`] sets it).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Library, Result};
use crate::sys;

/// The oldest CUDA runtime the crate works with (the bindings come from the 13.0 headers).
pub const MIN_RUNTIME: crate::Version = crate::Version {
    major: 13,
    minor: 0,
};

/// Where a library is looked for, in order: `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64`,
/// `/usr/local/cuda/lib64`, then the bare file name (the dynamic loader's own search path,
/// `LD_LIBRARY_PATH` and `ldconfig`'s cache). NCCL has its own list: [`nccl_candidates`]; the
/// driver, the bare file name only (it comes with the NVIDIA driver, not the toolkit).
pub fn candidates(library: Library) -> Vec<PathBuf> {
    if library == Library::Nccl {
        return nccl_candidates();
    }
    if library == Library::Driver {
        return driver_candidates();
    }
    let soname = library.soname();
    let mut out = Vec::new();
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(dir) = std::env::var_os(var) {
            out.push(PathBuf::from(dir).join("lib64").join(soname));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/lib64").join(soname));
    out.push(PathBuf::from(soname));
    out
}

/// Where the driver (`libcuda.so.1`) is looked for: by its bare name alone, on the loader's
/// path, as the CUDA runtime itself opens it, so that both use the one driver the system has
/// (a toolkit's `lib64/stubs` copy cannot run anything).
pub fn driver_candidates() -> Vec<PathBuf> {
    vec![PathBuf::from(Library::Driver.soname())]
}

/// The variable that names NCCL explicitly: the path of `libnccl.so.2`, or of its directory.
pub const NCCL_PATH_VAR: &str = "CUDAGRAPH_NCCL_PATH";

/// Where NCCL (`libnccl.so.2`) is looked for, in order:
/// 1. `$CUDAGRAPH_NCCL_PATH` ([`NCCL_PATH_VAR`]): the library file, or its directory;
/// 2. `$CUDA_PATH/lib64`, `$CUDA_HOME/lib64`, `/usr/local/cuda/lib64`;
/// 3. the bare file name (the loader's path: `LD_LIBRARY_PATH`, `ldconfig`'s cache, where a
///    system package such as `libnccl2` puts it);
/// 4. the `nvidia-nccl-cu13` Python wheel's `nvidia/nccl/lib/` in the site-packages of
///    `$VIRTUAL_ENV`, `$CONDA_PREFIX`, `~/.local` and `/usr/local/lib`, `/usr/lib`, `/opt/conda/lib`
///    (`python3*/{site,dist}-packages`; those that exist, newest Python first).
pub fn nccl_candidates() -> Vec<PathBuf> {
    let soname = Library::Nccl.soname();
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os(NCCL_PATH_VAR).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        out.push(if p.is_dir() { p.join(soname) } else { p });
    }
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Some(dir) = std::env::var_os(var) {
            out.push(PathBuf::from(dir).join("lib64").join(soname));
        }
    }
    out.push(PathBuf::from("/usr/local/cuda/lib64").join(soname));
    out.push(PathBuf::from(soname));
    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(root) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            lib_dirs.push(PathBuf::from(root).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME").filter(|p| !p.is_empty()) {
        lib_dirs.push(PathBuf::from(home).join(".local/lib"));
    }
    lib_dirs.extend(["/usr/local/lib", "/usr/lib", "/opt/conda/lib"].map(PathBuf::from));
    for dir in lib_dirs {
        out.extend(python_wheel_libs(&dir, soname));
    }
    out
}

/// `dir/python3*/{site,dist}-packages/nvidia/nccl/lib/soname` that exist, newest Python first.
fn python_wheel_libs(dir: &Path, soname: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pythons: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let minor = name.strip_prefix("python3")?;
            let minor = minor.strip_prefix('.').unwrap_or(minor);
            let key = if minor.is_empty() {
                0
            } else {
                minor.parse().ok()?
            };
            Some((key, e.path()))
        })
        .collect();
    pythons.sort_by(|a, b| b.cmp(a));
    let mut out = Vec::new();
    for (_, py) in pythons {
        for packages in ["site-packages", "dist-packages"] {
            let lib = py.join(packages).join("nvidia/nccl/lib").join(soname);
            if lib.exists() {
                out.push(lib);
            }
        }
    }
    out
}

/// The value of `NCCL_NVLS_ENABLE` NCCL will see, checked before NCCL is loaded: NVLink
/// multicast (NVLS) must be off in everything the crate starts (a program using it can put a
/// host's shared GPUs out of service), so the variable must be set. `Ok` with the value when it
/// is set (an explicit `1` is the program's own choice and is left alone); an
/// [`Error::BadEnv`] (`value: None`) saying how to set it when it is unset.
///
/// The crate never writes the environment from safe code: `std::env::set_var` races with C
/// code reading the environment (`getenv`) on another thread — the CUDA runtime's threads, a
/// library's — which is undefined behaviour. Set `NCCL_NVLS_ENABLE=0` in the environment the
/// program starts with, or call [`set_nccl_nvls_off`] at the start of `main`, before any other
/// thread exists.
pub fn nccl_nvls_setting() -> Result<String> {
    match std::env::var("NCCL_NVLS_ENABLE") {
        Ok(v) => Ok(v),
        Err(_) => Err(Error::BadEnv {
            variable: "NCCL_NVLS_ENABLE",
            value: None,
            expected: "a value set before NCCL is loaded (NVLink multicast must be off: 0). \
                       Start the program with NCCL_NVLS_ENABLE=0 in its environment, or call \
                       `unsafe { cudagraph::load::set_nccl_nvls_off() }` first thing in main, \
                       before any other thread starts",
        }),
    }
}

/// Sets `NCCL_NVLS_ENABLE=0` (NVLink multicast off) unless the variable is already set, for
/// NCCL to read when it initialises a communicator. Returns whether it set it.
///
/// # Safety
/// No other thread may read or write the environment during the call (C `getenv`/`setenv`
/// are not synchronised with it): call it at the start of `main`, before the program (or the
/// CUDA runtime, or any library) starts a thread.
pub unsafe fn set_nccl_nvls_off() -> bool {
    if std::env::var_os("NCCL_NVLS_ENABLE").is_some() {
        return false;
    }
    // Edition 2021: `set_var` is a safe call, but it is sound only under this function's
    // contract (no concurrent environment access).
    std::env::set_var("NCCL_NVLS_ENABLE", "0");
    true
}

/// The oldest NCCL the crate works with (the bindings come from NCCL 2.28's `nccl.h`).
pub const MIN_NCCL: crate::Version = crate::Version {
    major: 2,
    minor: 28,
};

/// Decodes NCCL's version code (`22809` is 2.28.9; before 2.9, `2708` was 2.7.8).
pub fn nccl_version_from_code(code: i32) -> crate::Version {
    let v = code.max(0) as u32;
    if v >= 10000 {
        crate::Version {
            major: v / 10000,
            minor: (v % 10000) / 100,
        }
    } else {
        crate::Version {
            major: v / 1000,
            minor: (v % 1000) / 100,
        }
    }
}

/// Opens the first candidate that loads, with `open` doing the loading (bindgen's generated
/// constructor). The error lists everything tried.
pub(crate) fn open_first<T>(
    library: Library,
    candidates: &[PathBuf],
    open: impl Fn(&PathBuf) -> std::result::Result<T, libloading::Error>,
) -> Result<T> {
    let mut reason = String::from("no candidate paths");
    for path in candidates {
        // A path with a directory that does not exist cannot load: skip it quietly, but keep
        // the bare soname attempt, which searches the loader's path.
        if path.components().count() > 1 && !path.exists() {
            reason = format!("{} does not exist", path.display());
            continue;
        }
        match open(path) {
            Ok(lib) => return Ok(lib),
            Err(e) => {
                reason = match std::error::Error::source(&e) {
                    Some(src) => format!("{e}: {src}"),
                    None => e.to_string(),
                }
            }
        }
    }
    Err(Error::LibraryNotFound {
        library,
        soname: library.soname(),
        tried: candidates.iter().map(|p| p.display().to_string()).collect(),
        reason,
    })
}

macro_rules! loader {
    ($fn_name:ident, $ty:ty, $lib:expr, $check:expr) => {
        #[doc = concat!("The process-wide handle to ", stringify!($ty), ", opened on first use.")]
        pub fn $fn_name() -> Result<&'static $ty> {
            static CELL: OnceLock<Result<$ty>> = OnceLock::new();
            CELL.get_or_init(|| {
                let lib = open_first($lib, &candidates($lib), |p| {
                    // SAFETY: loading a CUDA library runs its initialisers, which are sound to
                    // run at any time; the generated constructor only looks up symbols.
                    unsafe { <$ty>::new(p) }
                })?;
                let check: fn(&$ty) -> Result<()> = $check;
                check(&lib)?;
                Ok(lib)
            })
            .as_ref()
            .map_err(Clone::clone)
        }
    };
}

loader!(cudart, sys::cudart::Cudart, Library::Cudart, |lib| {
    let f = lib
        .cudaRuntimeGetVersion
        .as_ref()
        .map_err(|_| Error::MissingSymbol {
            library: Library::Cudart,
            symbol: "cudaRuntimeGetVersion",
        })?;
    let mut v = 0;
    // SAFETY: `v` is a valid out-pointer for the duration of the call.
    unsafe { f(&mut v) };
    let found = crate::Version::from_cuda(v);
    if found < MIN_RUNTIME {
        return Err(Error::TooOld {
            what: "the CUDA runtime (libcudart)",
            found,
            required: MIN_RUNTIME,
            hint: "install the CUDA 13 runtime library",
        });
    }
    Ok(())
});
/// The cell [`driver`] opens the driver into.
static DRIVER: OnceLock<Result<sys::cuda::Cuda>> = OnceLock::new();

/// The process-wide handle to the CUDA driver (`libcuda.so.1`), opened on first use from
/// [`driver_candidates`] and initialised (`cuInit`).
pub fn driver() -> Result<&'static sys::cuda::Cuda> {
    DRIVER
        .get_or_init(|| {
            let lib = open_first(Library::Driver, &driver_candidates(), |p| {
                // SAFETY: the driver's initialisers are sound to run at any time (the runtime
                // opens the same library); the generated constructor only looks up symbols.
                unsafe { sys::cuda::Cuda::new(p) }
            })?;
            let init = lib.cuInit.as_ref().map_err(|_| Error::MissingSymbol {
                library: Library::Driver,
                symbol: "cuInit",
            })?;
            // Every other driver call needs it; the runtime has made it already when the crate
            // calls the driver (a device is open), and repeating it is harmless.
            // SAFETY: `cuInit(0)` takes no pointers; it may be called any number of times.
            let status = unsafe { init(0) };
            if status != sys::CUresult::CUDA_SUCCESS {
                return Err(driver_error(Some(&lib), "cuInit", status));
            }
            Ok(lib)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The [`Error::Cuda`] for a failed driver call, with the error's name and message from `lib`
/// (none without it: the numeric code). Here rather than in `result::driver` (which calls it)
/// because [`driver`] needs it before the library is kept.
pub(crate) fn driver_error(
    lib: Option<&sys::cuda::Cuda>,
    call: &'static str,
    status: sys::CUresult,
) -> Error {
    use std::os::raw::c_char;
    type Describe = unsafe extern "C" fn(sys::CUresult, *mut *const c_char) -> sys::CUresult;
    let text = |f: Option<&Describe>| {
        let f = f?;
        let mut p: *const c_char = std::ptr::null();
        // SAFETY: `p` is a valid out-pointer; the driver takes any status value (for an
        // unknown one it returns an error and leaves `p` null) and points `p` at a static
        // NUL-terminated string.
        let ok = unsafe { f(status, &mut p) } == sys::CUresult::CUDA_SUCCESS;
        (ok && !p.is_null()).then(|| {
            // SAFETY: as above: on success `p` is a static NUL-terminated string.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        })
    };
    let code = status.0 as i32;
    let name = lib.and_then(|l| text(l.cuGetErrorName.as_ref().ok()));
    let message = lib.and_then(|l| text(l.cuGetErrorString.as_ref().ok()));
    Error::Cuda {
        call,
        code,
        name: name.unwrap_or_else(|| format!("CUresult({code})")),
        message: message.unwrap_or_default(),
    }
}

/// The driver if [`driver`] has opened it, without opening it.
pub(crate) fn driver_if_loaded() -> Option<&'static sys::cuda::Cuda> {
    DRIVER.get().and_then(|r| r.as_ref().ok())
}

loader!(cufft, sys::cufft::Cufft, Library::Cufft, |_| Ok(()));
loader!(nvrtc, sys::nvrtc::Nvrtc, Library::Nvrtc, |_| Ok(()));

/// The process-wide handle to NCCL (`libnccl.so.2`, 2.28 or newer), opened on first use from
/// [`nccl_candidates`], once NVLink multicast is known to be off for it
/// ([`nccl_nvls_setting`]: `NCCL_NVLS_ENABLE` must be set).
pub fn nccl() -> Result<&'static sys::nccl::Nccl> {
    static CELL: OnceLock<Result<sys::nccl::Nccl>> = OnceLock::new();
    // Checked on every call (not kept with the library): a program may set the variable after
    // a first refusal.
    nccl_nvls_setting()?;
    CELL.get_or_init(|| {
        let lib = open_first(Library::Nccl, &nccl_candidates(), |p| {
            // SAFETY: loading NCCL runs its initialisers, which only set up static state; the
            // generated constructor only looks up symbols.
            unsafe { sys::nccl::Nccl::new(p) }
        })?;
        let f = lib
            .ncclGetVersion
            .as_ref()
            .map_err(|_| Error::MissingSymbol {
                library: Library::Nccl,
                symbol: "ncclGetVersion",
            })?;
        let mut v = 0;
        // SAFETY: `v` is a valid out-pointer for the duration of the call.
        unsafe { f(&mut v) };
        let found = nccl_version_from_code(v);
        if found < MIN_NCCL {
            return Err(Error::TooOld {
                what: "NCCL (libnccl.so.2)",
                found,
                required: MIN_NCCL,
                hint: "install NCCL 2.28 or newer for CUDA 13 (pip install nvidia-nccl-cu13)",
            });
        }
        Ok(lib)
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// The process-wide handle to cuBLAS (`libcublas.so.13`), opened on first use from
/// [`candidates`]. cuBLASLt (`libcublasLt.so.13`), which cuBLAS needs, is opened first from the
/// same places and stays loaded for the process: the dynamic loader then resolves cuBLAS's
/// dependency to it, and a missing cuBLASLt is named as such ([`Error::LibraryNotFound`] with
/// [`Library::CublasLt`]) rather than as cuBLAS failing to load.
pub fn cublas() -> Result<&'static sys::cublas::Cublas> {
    static LT: OnceLock<Result<libloading::Library>> = OnceLock::new();
    static CELL: OnceLock<Result<sys::cublas::Cublas>> = OnceLock::new();
    CELL.get_or_init(|| {
        LT.get_or_init(|| {
            open_first(Library::CublasLt, &candidates(Library::CublasLt), |p| {
                // SAFETY: loading cuBLASLt runs only its initialisers.
                unsafe { libloading::Library::new(p) }
            })
        })
        .as_ref()
        .map_err(Clone::clone)?;
        open_first(Library::Cublas, &candidates(Library::Cublas), |p| {
            // SAFETY: loading cuBLAS runs only its initialisers; the generated constructor
            // only looks up symbols.
            unsafe { sys::cublas::Cublas::new(p) }
        })
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Checks once that libnvJitLink, which cuFFT loads for LTO callbacks, can be loaded. The
/// library stays loaded for the process.
pub fn nvjitlink() -> Result<()> {
    static CELL: OnceLock<Result<libloading::Library>> = OnceLock::new();
    CELL.get_or_init(|| {
        open_first(Library::NvJitLink, &candidates(Library::NvJitLink), |p| {
            // SAFETY: loading nvJitLink runs only its initialisers.
            unsafe { libloading::Library::new(p) }
        })
    })
    .as_ref()
    .map(|_| ())
    .map_err(Clone::clone)
}

/// Calls a function of a loaded library, turning a missing symbol into
/// [`Error::MissingSymbol`]. Evaluates to the function's return value.
macro_rules! ffi {
    ($lib:expr, $which:expr, $f:ident ( $($arg:expr),* $(,)? )) => {{
        let f = $lib.$f.as_ref().map_err(|_| $crate::error::Error::MissingSymbol {
            library: $which,
            symbol: stringify!($f),
        })?;
        f($($arg),*)
    }};
}
pub(crate) use ffi;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_typed_error_listing_what_was_tried() {
        let tried = vec![
            PathBuf::from("/nonexistent/dir/libcudart.so.13"),
            PathBuf::from("libcudagraph-test-does-not-exist.so.13"),
        ];
        let err = open_first(Library::Cudart, &tried, |p| {
            // SAFETY: the named file does not exist, so nothing is loaded or run.
            unsafe { libloading::Library::new(p) }
        })
        .map(|_| ())
        .unwrap_err();
        match &err {
            Error::LibraryNotFound {
                library,
                tried: t,
                soname,
                ..
            } => {
                assert_eq!(*library, Library::Cudart);
                assert_eq!(*soname, "libcudart.so.13");
                assert_eq!(t.len(), 2);
            }
            other => panic!("unexpected error {other:?}"),
        }
        let text = err.to_string();
        assert!(text.contains("libcudart.so.13"), "{text}");
        assert!(text.contains("LD_LIBRARY_PATH"), "{text}");
    }

    #[test]
    fn missing_nvjitlink_says_what_it_is_for() {
        let err = open_first(
            Library::NvJitLink,
            &[PathBuf::from("libcudagraph-test-no-nvjitlink.so.13")],
            // SAFETY: the named file does not exist, so nothing is loaded or run.
            |p| unsafe { libloading::Library::new(p) },
        )
        .map(|_| ())
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("nvJitLink (needed for cuFFT LTO callbacks)"),
            "{err}"
        );
        assert!(err.contains("libnvJitLink.so.13"), "{err}");
    }

    #[test]
    fn missing_cublas_is_a_typed_error_naming_the_library() {
        for library in [Library::Cublas, Library::CublasLt] {
            let err = open_first(
                library,
                &[PathBuf::from("/nonexistent/cu13/lib").join(library.soname())],
                // SAFETY: the named file does not exist, so nothing is loaded or run.
                |p| unsafe { libloading::Library::new(p) },
            )
            .map(|_| ())
            .unwrap_err();
            assert!(
                matches!(&err, Error::LibraryNotFound { library: l, .. } if *l == library),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(library.soname()), "{text}");
            assert!(text.contains("nvidia-cublas"), "{text}");
        }
        assert_eq!(Library::Cublas.soname(), "libcublas.so.13");
        assert_eq!(Library::CublasLt.soname(), "libcublasLt.so.13");
    }

    #[test]
    fn candidates_honour_cuda_path_and_end_with_the_soname() {
        let c = candidates(Library::Cufft);
        assert_eq!(c.last().unwrap(), &PathBuf::from("libcufft.so.12"));
        assert!(c.contains(&PathBuf::from("/usr/local/cuda/lib64/libcufft.so.12")));
    }

    #[test]
    fn nccl_is_not_loaded_unless_nvlink_multicast_is_set() {
        // The test process's environment decides the branch; neither writes it.
        match std::env::var("NCCL_NVLS_ENABLE") {
            Ok(v) => assert_eq!(nccl_nvls_setting().unwrap(), v),
            Err(_) => {
                let e = nccl_nvls_setting().unwrap_err();
                assert!(
                    matches!(
                        &e,
                        Error::BadEnv {
                            variable: "NCCL_NVLS_ENABLE",
                            value: None,
                            ..
                        }
                    ),
                    "{e:?}"
                );
                let e = e.to_string();
                assert!(e.contains("NCCL_NVLS_ENABLE is unset"), "{e}");
                assert!(e.contains("set_nccl_nvls_off"), "{e}");
                let e = nccl().map(|_| ()).unwrap_err().to_string();
                assert!(e.contains("NCCL_NVLS_ENABLE is unset"), "{e}");
            }
        }
    }

    #[test]
    fn missing_nccl_is_a_typed_error_with_the_paths_tried_and_how_to_install_it() {
        let tried = vec![
            PathBuf::from("/nonexistent/nccl/lib/libnccl.so.2"),
            PathBuf::from("libcudagraph-test-no-nccl.so.2"),
        ];
        let err = open_first(Library::Nccl, &tried, |p| {
            // SAFETY: the named files do not exist, so nothing is loaded or run.
            unsafe { libloading::Library::new(p) }
        })
        .map(|_| ())
        .unwrap_err();
        let Error::LibraryNotFound {
            library,
            soname,
            tried: t,
            ..
        } = &err
        else {
            panic!("unexpected error {err:?}");
        };
        assert_eq!(*library, Library::Nccl);
        assert_eq!(*soname, "libnccl.so.2");
        assert_eq!(
            t,
            &[
                "/nonexistent/nccl/lib/libnccl.so.2",
                "libcudagraph-test-no-nccl.so.2"
            ]
        );
        let text = err.to_string();
        assert!(
            text.starts_with("NCCL (libnccl.so.2) could not be loaded"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/nccl/lib/libnccl.so.2"),
            "{text}"
        );
        assert!(text.contains("CUDAGRAPH_NCCL_PATH"), "{text}");
        assert!(text.contains("nvidia-nccl-cu13"), "{text}");
    }

    #[test]
    fn nccl_candidates_search_the_loader_path_and_python_wheels() {
        let c = nccl_candidates();
        assert!(c.contains(&PathBuf::from("libnccl.so.2")), "{c:?}");
        assert!(c.contains(&PathBuf::from("/usr/local/cuda/lib64/libnccl.so.2")));
        // A fake site-packages layout is found, newest Python first.
        let root = std::env::temp_dir().join(format!("cudagraph-nccl-{}", std::process::id()));
        for py in ["python3.10", "python3.12"] {
            let lib = root.join(py).join("dist-packages/nvidia/nccl/lib");
            std::fs::create_dir_all(&lib).unwrap();
            std::fs::write(lib.join("libnccl.so.2"), b"").unwrap();
        }
        std::fs::create_dir_all(root.join("python2.7/site-packages")).unwrap();
        let found = python_wheel_libs(&root, "libnccl.so.2");
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(
            found,
            [
                root.join("python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.2"),
                root.join("python3.10/dist-packages/nvidia/nccl/lib/libnccl.so.2"),
            ]
        );
    }

    #[test]
    fn nccl_version_codes() {
        assert_eq!(nccl_version_from_code(22809).to_string(), "2.28");
        assert_eq!(nccl_version_from_code(23003).to_string(), "2.30");
        assert_eq!(nccl_version_from_code(2708).to_string(), "2.7");
        assert!(nccl_version_from_code(22703) < MIN_NCCL);
    }

    #[test]
    fn version_decoding() {
        assert_eq!(
            crate::Version::from_cuda(13000),
            crate::Version {
                major: 13,
                minor: 0
            }
        );
        assert_eq!(crate::Version::from_cuda(12040).to_string(), "12.4");
    }
}
