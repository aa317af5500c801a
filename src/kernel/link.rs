//! Linking NVRTC's relocatable device code with the device runtime (`libcudadevrt.a`), which
//! device-side `cudaGraphLaunch` (and dynamic parallelism) needs: the driver's JIT linker
//! (`cuLinkCreate` … `cuLinkComplete`), for [`CodeKind::DeviceRuntime`](super::CodeKind).
//! Where the library is found is `compile.rs`'s business (with the toolkit's include directory).

use std::ffi::CString;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::driver as dr;
use crate::sys;

/// Links `ptx` (NVRTC output compiled with `-rdc=true`, NUL-terminated; `name` in the
/// linker's messages) with the device runtime `devrt` on `device`: a cubin to load.
pub(crate) fn with_device_runtime(
    device: &Device,
    ptx: &[u8],
    name: &str,
    devrt: &std::path::Path,
) -> Result<Vec<u8>> {
    let name = CString::new(name).map_err(|_| Error::Nul {
        what: "the program name",
    })?;
    let path = CString::new(devrt.as_os_str().as_encoded_bytes()).map_err(|_| Error::Nul {
        what: "the device runtime's path",
    })?;
    // The linker works in the current context: the device's primary context.
    device.bind()?;
    let mut log = vec![0u8; 16 * 1024];
    let mut slots = dr::LinkSlots::new(&mut log);
    // SAFETY: a context is current (above); `slots` and `log` (heap memory, not resized)
    // stay in place until after `link_destroy` below, on every path out of this function
    // (the link calls return errors, they do not unwind).
    let state = unsafe { dr::link_create(&mut slots)? };
    let linked = (|| {
        // SAFETY: `state` is live; `ptx` is NVRTC's NUL-terminated PTX.
        unsafe { dr::link_add_data(state, sys::CUjitInputType::CU_JIT_INPUT_PTX, ptx, &name)? };
        // SAFETY: `state` is live; the file is a static library of device code.
        unsafe { dr::link_add_file(state, sys::CUjitInputType::CU_JIT_INPUT_LIBRARY, &path)? };
        // SAFETY: `state` is live.
        unsafe { dr::link_complete(state) }
    })();
    // SAFETY: `state` is live and used no more. A failure to destroy it leaks host memory of
    // the linker only.
    let _ = unsafe { dr::link_destroy(state) };
    linked.map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]).trim().to_string();
        if log.is_empty() {
            e
        } else {
            Error::Compile {
                program: name.to_string_lossy().into_owned(),
                log: format!("linking with {}: {e}\n{log}", devrt.display()),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::kernel::{compile, CodeKind, CompileOptions};
    use crate::Error;

    #[test]
    fn linking_with_the_device_runtime_needs_a_device() {
        let options = CompileOptions {
            arch: Some((9, 0)),
            kind: CodeKind::DeviceRuntime,
            ..Default::default()
        };
        // Refused before NVRTC is asked anything (none is installed here).
        match compile(None, "__global__ void k() {}", &options) {
            Err(Error::BadOptions { what, problem }) => {
                assert_eq!(what, "compile");
                assert!(problem.contains("give a device"), "{problem}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_device_runtime_is_looked_for_under_the_toolkit() {
        use crate::kernel::compile::devrt_under;
        let dir = std::env::temp_dir().join(format!("cudagraph-devrt-{}", std::process::id()));
        let targets = dir.join("targets/x86_64-linux/lib");
        std::fs::create_dir_all(&targets).unwrap();
        assert_eq!(devrt_under(&dir), None);
        std::fs::write(targets.join("libcudadevrt.a"), "!<arch>\n").unwrap();
        assert_eq!(devrt_under(&dir), Some(targets.join("libcudadevrt.a")));
        // lib64 first, where a toolkit has both.
        std::fs::create_dir_all(dir.join("lib64")).unwrap();
        std::fs::write(dir.join("lib64/libcudadevrt.a"), "!<arch>\n").unwrap();
        assert_eq!(devrt_under(&dir), Some(dir.join("lib64/libcudadevrt.a")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
