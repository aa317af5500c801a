//! Loaded GPU code: [`Module`] (`cudaLibrary_t`), from which kernels are taken.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::compile::{compile, CodeKind, CompileOptions};
use super::launch::{value_words, Kernel, KernelInner, KernelOrigin, ParamInfo};
use super::library::ModuleInner;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::runtime as rt;
use crate::track::Uses;

/// Loaded GPU code (`cudaLibrary_t`), from which kernels are taken.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("raw", &self.inner.raw)
            .finish()
    }
}

impl Module {
    /// Compiles `source` for `device` with default options and loads it.
    pub fn from_source(device: &Device, source: &str) -> Result<Module> {
        Module::from_source_with(device, source, &CompileOptions::default())
    }

    /// Compiles `source` with `options` and loads it.
    pub fn from_source_with(
        device: &Device,
        source: &str,
        options: &CompileOptions,
    ) -> Result<Module> {
        if options.kind != CodeKind::Cubin {
            return Err(Error::Invalid(
                "a module is loaded from a cubin; LTO-IR is for cuFFT callbacks".into(),
            ));
        }
        let c = compile(Some(device), source, options)?;
        Module::load(device, &c.image, c.lowered_names)
    }

    /// Loads a cubin, PTX or fatbin image (`lowered_names` maps C++ names to mangled ones).
    pub fn load(
        device: &Device,
        image: &[u8],
        lowered_names: HashMap<String, String>,
    ) -> Result<Module> {
        device.bind()?;
        // SAFETY: CUDA validates the image; the library is unloaded by ModuleInner's Drop.
        let raw = unsafe { rt::library_load_data(image)? };
        Ok(Module {
            inner: Arc::new(ModuleInner {
                raw,
                device: device.clone(),
                lowered_names,
                uses: Uses::default(),
            }),
        })
    }

    /// The kernel `name` (an `extern "C"` name, or a name expression given at compile time),
    /// with its parameter layout and attributes read from CUDA.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let symbol = self
            .inner
            .lowered_names
            .get(name)
            .map(String::as_str)
            .unwrap_or(name);
        let c = CString::new(symbol).map_err(|_| Error::Invalid("kernel name has a NUL".into()))?;
        self.inner.device.bind()?;
        // SAFETY: the library is loaded.
        let raw = unsafe { rt::library_get_kernel(self.inner.raw, &c) }.map_err(|e| {
            Error::KernelNotFound {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })?;
        let func = raw as *const c_void;
        let mut params = Vec::new();
        // SAFETY: `func` is a live kernel; indexes past the last parameter answer `None`.
        while let Some((offset, size)) = unsafe { rt::func_param_info(func, params.len())? } {
            params.push(ParamInfo { offset, size });
        }
        // SAFETY: `func` is a live kernel.
        let attrs = unsafe { rt::func_attributes(func)? };
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                name: name.to_string(),
                raw: Some(raw),
                value_words: value_words(&params),
                params,
                max_threads_per_block: attrs.maxThreadsPerBlock.max(0) as u32,
                static_shared_mem: attrs.sharedSizeBytes,
                max_dynamic_shared_mem: AtomicUsize::new(
                    attrs.maxDynamicSharedSizeBytes.max(0) as usize
                ),
                origin: KernelOrigin::Module {
                    module: self.inner.clone(),
                },
            }),
        })
    }
}
