//! Loaded GPU code: [`Module`] (`cudaLibrary_t`), from which kernels are taken.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use super::compile::{compile, CodeKind, CompileOptions};
use super::launch::{
    value_words, Kernel, KernelCode, KernelInner, KernelOrigin, ParamInfo, ParamSource,
};
use super::library::ModuleInner;
use super::{cubin, fatbin, ptx};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::result::runtime as rt;
use crate::stream::track::GpuUses;

/// Loaded GPU code (`cudaLibrary_t`), from which kernels are taken.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
    /// The image, when it is an ELF cubin, PTX text or a fatbin of those the reader can read:
    /// where [`Module::kernel`] reads parameter layouts.
    image: Option<Image>,
}

/// A module's image, kept for reading kernels' parameter layouts.
#[derive(Debug, Clone)]
enum Image {
    /// An ELF cubin (its `.nv.info` sections).
    Cubin(Arc<[u8]>),
    /// PTX text (its `.entry` declarations).
    Ptx(Arc<str>),
    /// A fatbin's images (cubins and PTX, decompressed), every one of them.
    Fatbin(Vec<Image>),
}

impl Image {
    /// The image kept for `bytes`: a cubin, PTX (text with a `.version` directive, up to an
    /// optional NUL terminator), a fatbin whose images are all one or the other
    /// (`kernel/fatbin.rs`; an image that is itself a fatbin is not read: no recursion), or
    /// nothing (anything else).
    fn of(bytes: &[u8]) -> Option<Image> {
        if fatbin::is_fatbin(bytes) {
            let images = fatbin::images(bytes)?
                .into_iter()
                .map(|i| match Image::single(&i.bytes)? {
                    Image::Cubin(c) if i.elf => Some(Image::Cubin(c)),
                    Image::Ptx(t) if !i.elf => Some(Image::Ptx(t)),
                    _ => None,
                })
                .collect::<Option<Vec<_>>>()?;
            return Some(Image::Fatbin(images));
        }
        Image::single(bytes)
    }

    /// A cubin or PTX image (not a fatbin).
    fn single(bytes: &[u8]) -> Option<Image> {
        if bytes.starts_with(b"\x7fELF") {
            return Some(Image::Cubin(Arc::from(bytes)));
        }
        let text = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
        let text = std::str::from_utf8(text).ok()?;
        text.contains(".version")
            .then(|| Image::Ptx(Arc::from(text)))
    }

    /// The `(offset, size)` of each parameter of `symbol`, as the image describes them, and
    /// where from.
    fn params(&self, symbol: &str) -> Option<(Vec<(usize, usize)>, ParamSource)> {
        match self {
            Image::Cubin(image) => cubin::kernel_params(image, symbol).map(|d| {
                let layout = d
                    .iter()
                    .map(|p| (usize::from(p.offset), usize::from(p.size)));
                (layout.collect(), ParamSource::Cubin)
            }),
            Image::Ptx(text) => ptx::entry_params(text, symbol).map(|d| (d, ParamSource::Ptx)),
            // CUDA loads one of the images (the cubin for the device, else the PTX, compiled):
            // which one is CUDA's choice, so every image must describe `symbol`, the same way.
            Image::Fatbin(images) => {
                let mut layouts = images.iter().map(|i| i.params(symbol).map(|(l, _)| l));
                let first = layouts.next()??;
                layouts
                    .all(|l| l.as_ref() == Some(&first))
                    .then_some((first, ParamSource::Fatbin))
            }
        }
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("raw", &self.inner.raw)
            .field(
                "image",
                &self.image.as_ref().map(|i| match i {
                    Image::Cubin(c) => ("cubin", c.len()),
                    Image::Ptx(t) => ("ptx", t.len()),
                    Image::Fatbin(images) => ("fatbin images", images.len()),
                }),
            )
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
        if options.kind == CodeKind::LtoIr {
            return Err(Error::BadOptions {
                what: "Module::from_source_with",
                problem: "a module is loaded from a cubin (CodeKind::Cubin, or \
                          CodeKind::DeviceRuntime linked with the device runtime); LTO-IR is for \
                          cuFFT callbacks"
                    .into(),
            });
        }
        let c = compile(Some(device), source, options)?;
        Module::load(device, &c.image, c.lowered_names)
    }

    /// Loads a cubin, PTX or fatbin image (`lowered_names` maps C++ names to mangled ones).
    ///
    /// A cubin (an ELF image, as [`compile`](fn@compile) makes) or PTX text is also kept,
    /// copied, for [`Module::kernel`] to read parameter layouts from, and so are the images of
    /// a fatbin (decompressed) when the reader can read every one of them.
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
                uses: GpuUses::default(),
                foreign: None,
            }),
            image: Image::of(image),
        })
    }

    /// The kernel `name` (an `extern "C"` name, or a name expression given at compile time),
    /// with its parameter layout and attributes read from CUDA.
    ///
    /// The layout comes from the image when the module was loaded from a cubin that describes
    /// the kernel's parameters ([`ParamSource::Cubin`]: its `.nv.info` section) or from PTX
    /// ([`ParamSource::Ptx`]: the `.entry` declaration): the count and layout are read there,
    /// then each parameter is confirmed with `cudaFuncGetParamInfo`, and a difference is
    /// [`Error::ParamLayoutMismatch`]. From a fatbin, every image it holds (cubins, PTX) must
    /// describe the kernel, all the same way ([`ParamSource::Fatbin`]), since CUDA chooses
    /// which one it loads. Otherwise (a cubin whose records the reader does not know, a fatbin
    /// with an image it cannot read or images that disagree) CUDA is asked for parameter 0,
    /// 1, … until it refuses the index past the last ([`ParamSource::Probed`]); that refusal
    /// is not an error here, but `compute-sanitizer` lists it as a failed API call.
    pub fn kernel(&self, name: &str) -> Result<Kernel> {
        let symbol = self
            .inner
            .lowered_names
            .get(name)
            .map(String::as_str)
            .unwrap_or(name);
        let c = CString::new(symbol).map_err(|_| Error::Nul {
            what: "the kernel name",
        })?;
        self.inner.device.bind()?;
        // SAFETY: the library is loaded.
        let raw = unsafe { rt::library_get_kernel(self.inner.raw, &c) }.map_err(|e| {
            Error::KernelNotFound {
                name: name.to_string(),
                reason: e.to_string(),
            }
        })?;
        let func = raw as *const c_void;
        // SAFETY: `func` is a live kernel, taken from the loaded library above; indexes past
        // the last parameter answer `None`.
        let query = &mut |index| unsafe { rt::func_param_info(func, index) };
        let (params, param_source) = match self.image.as_ref().and_then(|i| i.params(symbol)) {
            Some((d, source)) => (confirmed(name, &d, query)?, source),
            None => (probed(query)?, ParamSource::Probed),
        };
        // SAFETY: `func` is a live kernel.
        let attrs = unsafe { rt::func_attributes(func)? };
        Ok(Kernel {
            inner: Arc::new(KernelInner {
                name: name.to_string(),
                raw: Some(KernelCode::Library(raw)),
                value_words: value_words(&params),
                params,
                param_source,
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

impl Kernel {
    /// A kernel whose code another library loaded and keeps (`owner`, dropped after the
    /// stream launches of the kernel have run): a context's function, with its layout and
    /// attributes as the driver gave them.
    #[cfg(feature = "cudarc")]
    #[allow(clippy::too_many_arguments)] // reason: one constructor, called from one place, filling every field
    pub(crate) fn foreign(
        name: String,
        device: Device,
        function: crate::sys::CUfunction,
        params: Vec<ParamInfo>,
        param_source: ParamSource,
        max_threads_per_block: u32,
        static_shared_mem: usize,
        max_dynamic_shared_mem: AtomicUsize,
        owner: Box<dyn std::any::Any + Send + Sync>,
    ) -> Kernel {
        Kernel {
            inner: Arc::new(KernelInner {
                name,
                raw: Some(KernelCode::Function(function)),
                value_words: value_words(&params),
                params,
                param_source,
                max_threads_per_block,
                static_shared_mem,
                max_dynamic_shared_mem,
                origin: KernelOrigin::Module {
                    module: Arc::new(ModuleInner {
                        raw: std::ptr::null_mut(),
                        device,
                        lowered_names: HashMap::new(),
                        uses: GpuUses::default(),
                        foreign: Some(owner),
                    }),
                },
            }),
        }
    }
}

/// The `(offset, size)` of each parameter of `symbol` as `image` (a cubin or PTX) describes
/// them, and where from; `None` for other images, or when the image does not describe it.
#[cfg_attr(not(any(feature = "cudarc", test)), allow(dead_code))]
pub(crate) fn described_params(
    image: &[u8],
    symbol: &str,
) -> Option<(Vec<(usize, usize)>, ParamSource)> {
    Image::of(image)?.params(symbol)
}

/// What a kernel's parameter query answers for parameter `index`: its offset and size, or
/// `None` past the last (`cudaFuncGetParamInfo`, or the driver's `cuFuncGetParamInfo`).
pub(crate) type ParamQuery<'a> = dyn FnMut(usize) -> Result<Option<(usize, usize)>> + 'a;

/// The layout the image describes, each parameter confirmed by `query` (asked only for
/// indexes below the count, which CUDA answers); a difference is
/// [`Error::ParamLayoutMismatch`].
pub(crate) fn confirmed(
    kernel: &str,
    described: &[(usize, usize)],
    query: &mut ParamQuery<'_>,
) -> Result<Vec<ParamInfo>> {
    let mut params = Vec::with_capacity(described.len());
    for (index, &image) in described.iter().enumerate() {
        let cuda = query(index)?;
        if cuda != Some(image) {
            return Err(Error::ParamLayoutMismatch {
                kernel: kernel.to_string(),
                index,
                cubin: image,
                cuda,
            });
        }
        params.push(ParamInfo {
            offset: image.0,
            size: image.1,
        });
    }
    Ok(params)
}

/// The layout from `query` alone, asked for indexes until it answers `None`.
pub(crate) fn probed(query: &mut ParamQuery<'_>) -> Result<Vec<ParamInfo>> {
    let mut params = Vec::new();
    while let Some((offset, size)) = query(params.len())? {
        params.push(ParamInfo { offset, size });
    }
    Ok(params)
}
