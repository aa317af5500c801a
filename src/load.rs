//! Run-time loading of the CUDA libraries.
//!
//! Nothing is linked at build time. Each library is opened once per process, the first time a
//! call needs it, from a list of candidate paths ([`candidates`]); the outcome, success or a typed
//! [`Error::LibraryNotFound`], is cached. Every symbol is looked up when the library is opened,
//! and a symbol that is missing is stored as such: only the call that needs it fails, with
//! [`Error::MissingSymbol`].

use std::path::PathBuf;
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
/// `LD_LIBRARY_PATH` and `ldconfig`'s cache).
pub fn candidates(library: Library) -> Vec<PathBuf> {
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
loader!(cufft, sys::cufft::Cufft, Library::Cufft, |_| Ok(()));
loader!(nvrtc, sys::nvrtc::Nvrtc, Library::Nvrtc, |_| Ok(()));

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
    fn candidates_honour_cuda_path_and_end_with_the_soname() {
        let c = candidates(Library::Cufft);
        assert_eq!(c.last().unwrap(), &PathBuf::from("libcufft.so.12"));
        assert!(c.contains(&PathBuf::from("/usr/local/cuda/lib64/libcufft.so.12")));
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
