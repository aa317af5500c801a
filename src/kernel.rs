//! Kernels: compiling CUDA C++ with NVRTC, loading it as a module, reading each kernel's
//! parameter layout, typed arguments, launch shapes, and plain stream launches.

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::device::{Device, DeviceKey, DeviceLimits};
use crate::error::{Error, Result};
use crate::memory::Region;
use crate::memory::{Allocation, DeviceBuffer, DeviceRepr, HostBuffer};
use crate::result::{nvrtc as nv, runtime as rt};
use crate::stream::Stream;
use crate::sys;
use crate::track::Uses;

// ---- compiling -----------------------------------------------------------------------------

/// What NVRTC produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CodeKind {
    /// Machine code for the device's architecture (`-arch=sm_XX`), loadable as a module.
    #[default]
    Cubin,
    /// LTO-IR (`-dlto -rdc=true -arch=compute_XX`), for cuFFT's LTO callbacks.
    LtoIr,
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
    /// C++ names (e.g. `"scale<float>"`) whose mangled names [`Module::kernel`] should find.
    /// Kernels declared `extern "C"` need none.
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
            return Err(Error::Invalid(
                "compile: give a device or CompileOptions::arch".into(),
            ))
        }
    };
    let arch = pick_arch(cc)?;
    let src = CString::new(source)
        .map_err(|_| Error::Invalid("kernel source contains a NUL byte".into()))?;
    let name = CString::new(options.name.as_str())
        .map_err(|_| Error::Invalid("program name contains a NUL byte".into()))?;
    let mut opts: Vec<CString> = Vec::new();
    let mut push = |s: String| -> Result<()> {
        opts.push(CString::new(s).map_err(|_| Error::Invalid("option contains a NUL".into()))?);
        Ok(())
    };
    match options.kind {
        CodeKind::Cubin => push(format!("-arch=sm_{arch}"))?,
        CodeKind::LtoIr => {
            push(format!("-arch=compute_{arch}"))?;
            push("-dlto".into())?;
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
        Some(format!(
            "nvrtc {major}.{minor}\nname {}\noptions {:?}\nexpressions {:?}\nsource\n{source}",
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
        .map_err(|_| Error::Invalid("name expression contains a NUL".into()))?;
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
        }
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

// ---- modules -------------------------------------------------------------------------------

struct ModuleInner {
    raw: sys::cudaLibrary_t,
    device: Device,
    lowered_names: HashMap<String, String>,
    /// Stream launches of its kernels that may still run.
    uses: Uses,
}

// SAFETY: library handles may be used from any thread.
unsafe impl Send for ModuleInner {}
// SAFETY: as above.
unsafe impl Sync for ModuleInner {}

impl Drop for ModuleInner {
    fn drop(&mut self) {
        if let Err(e) = self.uses.wait() {
            self.device
                .defer("a module (waiting for launches of its kernels)", e);
        }
        // SAFETY: last reference: every kernel and graph node of this module holds one, and
        // the stream launches of its kernels have completed (waited for above).
        if let Err(e) = unsafe { rt::library_unload(self.raw) } {
            self.device.defer("a module", e);
        }
    }
}

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

// ---- kernels -------------------------------------------------------------------------------

/// Where one kernel parameter lies in the parameter buffer, from `cudaFuncGetParamInfo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamInfo {
    /// Byte offset.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

enum KernelOrigin {
    Module {
        module: Arc<ModuleInner>,
    },
    /// A recording backend's kernel: a layout without code.
    Recording(u64),
}

pub(crate) struct KernelInner {
    name: String,
    raw: Option<sys::cudaKernel_t>,
    params: Vec<ParamInfo>,
    max_threads_per_block: u32,
    static_shared_mem: usize,
    max_dynamic_shared_mem: AtomicUsize,
    origin: KernelOrigin,
}

// SAFETY: kernel handles may be used from any thread.
unsafe impl Send for KernelInner {}
// SAFETY: as above.
unsafe impl Sync for KernelInner {}

/// A kernel of a [`Module`], with its parameter layout. Cheap to clone; keeps its module
/// loaded.
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<KernelInner>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("name", &self.inner.name)
            .field("params", &self.inner.params)
            .finish()
    }
}

impl Kernel {
    /// A kernel that has a name and a parameter layout but no code, made by a
    /// [`RecordingBackend`](crate::dag::RecordingBackend).
    pub(crate) fn recording(name: &str, param_sizes: &[usize], backend_id: u64) -> Kernel {
        let mut offset = 0usize;
        let params = param_sizes
            .iter()
            .map(|&size| {
                let align = size.clamp(1, 8).next_power_of_two();
                offset = offset.div_ceil(align) * align;
                let p = ParamInfo { offset, size };
                offset += size;
                p
            })
            .collect();
        Kernel {
            inner: Arc::new(KernelInner {
                name: name.to_string(),
                raw: None,
                params,
                max_threads_per_block: 1024,
                static_shared_mem: 0,
                max_dynamic_shared_mem: AtomicUsize::new(48 * 1024),
                origin: KernelOrigin::Recording(backend_id),
            }),
        }
    }

    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The parameter layout.
    pub fn params(&self) -> &[ParamInfo] {
        &self.inner.params
    }

    /// The most threads per block this kernel can be launched with (registers permitting).
    pub fn max_threads_per_block(&self) -> u32 {
        self.inner.max_threads_per_block
    }

    /// The most dynamic shared memory a launch may ask for (bytes).
    pub fn max_dynamic_shared_mem(&self) -> usize {
        self.inner.max_dynamic_shared_mem.load(Ordering::Relaxed)
    }

    /// Lets launches of this kernel use up to `bytes` of dynamic shared memory (above the
    /// 48 KiB default, up to the device's opt-in limit).
    pub fn set_max_dynamic_shared_mem(&self, bytes: usize) -> Result<()> {
        if let Some(raw) = self.inner.raw {
            // SAFETY: the kernel is live.
            unsafe {
                rt::func_set_attribute(
                    raw as *const c_void,
                    sys::cudaFuncAttribute::cudaFuncAttributeMaxDynamicSharedMemorySize,
                    i32::try_from(bytes).unwrap_or(i32::MAX),
                )?
            };
        }
        self.inner
            .max_dynamic_shared_mem
            .store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The raw handle, or `None` for a recording backend's kernel.
    pub(crate) fn raw(&self) -> Option<sys::cudaKernel_t> {
        self.inner.raw
    }

    /// The device of the kernel's module, or the recording backend's id.
    /// The device (or recording backend) the kernel belongs to.
    pub(crate) fn key(&self) -> DeviceKey {
        match self.home() {
            Ok(d) => d.key(),
            Err(id) => DeviceKey::Recording(id),
        }
    }

    pub(crate) fn home(&self) -> std::result::Result<&Device, u64> {
        match &self.inner.origin {
            KernelOrigin::Module { module } => Ok(&module.device),
            KernelOrigin::Recording(id) => Err(*id),
        }
    }

    /// Checks `args` against the parameter layout: count, each size, and buffers on the
    /// kernel's device. The error says which argument is wrong.
    pub fn check_args(&self, args: &[KernelArg]) -> Result<()> {
        self.args_problem(args).map_or(Ok(()), |problem| {
            Err(Error::KernelArgs {
                kernel: self.name().to_string(),
                problem,
            })
        })
    }

    pub(crate) fn args_problem(&self, args: &[KernelArg]) -> Option<String> {
        let params = &self.inner.params;
        if args.len() != params.len() {
            return Some(format!(
                "takes {} argument{} but {} were given",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                args.len()
            ));
        }
        args.iter()
            .enumerate()
            .find_map(|(i, a)| self.arg_problem(i, a))
    }

    /// What is wrong with `a` as argument `i`, if anything.
    pub(crate) fn arg_problem(&self, i: usize, a: &KernelArg) -> Option<String> {
        let params = &self.inner.params;
        let Some(p) = params.get(i) else {
            return Some(format!(
                "has {} parameters; there is no argument {i}",
                params.len()
            ));
        };
        if a.size() != p.size {
            return Some(format!(
                "argument {i} is {} bytes ({}) but parameter {i} is {} bytes",
                a.size(),
                a.describe(),
                p.size
            ));
        }
        if let Some(alloc) = &a.buffer {
            let same = match (self.home(), &alloc.owner) {
                (Ok(d), crate::memory::Owner::Cuda(bd)) => d == bd,
                (Err(k), crate::memory::Owner::Recording(b)) => k == *b,
                _ => false,
            };
            if !same {
                return Some(format!(
                    "argument {i} is a buffer of another device or backend than the kernel's"
                ));
            }
            if alloc.space != crate::memory::MemorySpace::Device {
                return Some(format!(
                    "argument {i} is a pinned host buffer; kernels take device buffers"
                ));
            }
        }
        None
    }

    /// Checks a launch shape against the device's and this kernel's limits.
    pub fn check_launch(&self, limits: &DeviceLimits, cfg: &LaunchConfig) -> Result<()> {
        self.launch_problem(limits, cfg).map_or(Ok(()), |problem| {
            Err(Error::LaunchShape {
                kernel: self.name().to_string(),
                problem,
            })
        })
    }

    pub(crate) fn launch_problem(
        &self,
        limits: &DeviceLimits,
        cfg: &LaunchConfig,
    ) -> Option<String> {
        // Formats only when something is wrong: this runs for every kernel node.
        let (g, b) = (cfg.grid, cfg.block);
        let shape = || format!("grid {g} block {b}");
        let gd = [g.x, g.y, g.z];
        let bd = [b.x, b.y, b.z];
        if gd.contains(&0) || bd.contains(&0) {
            return Some(format!("{} has a zero dimension", shape()));
        }
        for (i, axis) in ["x", "y", "z"].iter().enumerate() {
            if bd[i] > limits.max_block_dim[i] {
                return Some(format!(
                    "{}: block.{axis} = {} exceeds the device's {}",
                    shape(),
                    bd[i],
                    limits.max_block_dim[i]
                ));
            }
            if gd[i] > limits.max_grid_dim[i] {
                return Some(format!(
                    "{}: grid.{axis} = {} exceeds the device's {}",
                    shape(),
                    gd[i],
                    limits.max_grid_dim[i]
                ));
            }
        }
        let threads = bd.iter().map(|&d| d as u64).product::<u64>();
        let max = limits
            .max_threads_per_block
            .min(self.inner.max_threads_per_block.max(1)) as u64;
        if threads > max {
            return Some(format!(
                "{}: {threads} threads per block exceed the limit of {max} (device {}, kernel {})",
                shape(),
                limits.max_threads_per_block,
                self.inner.max_threads_per_block
            ));
        }
        let dynamic = cfg.shared_mem_bytes as usize;
        let allowed = self
            .max_dynamic_shared_mem()
            .min(limits.max_shared_mem_per_block_optin);
        if dynamic > allowed {
            return Some(format!(
                "{}: {dynamic} bytes of dynamic shared memory exceed the {allowed} allowed \
                 (raise it with Kernel::set_max_dynamic_shared_mem, up to the device's {})",
                shape(),
                limits.max_shared_mem_per_block_optin
            ));
        }
        if dynamic + self.inner.static_shared_mem > limits.max_shared_mem_per_block_optin {
            return Some(format!(
                "{}: {dynamic} dynamic + {} static bytes of shared memory exceed the device's {}",
                shape(),
                self.inner.static_shared_mem,
                limits.max_shared_mem_per_block_optin
            ));
        }
        None
    }

    /// Launches the kernel on `stream` (a plain stream launch, outside any graph), after
    /// checking the arguments and the launch shape. The buffers passed and the kernel's module
    /// may be dropped at once: their memory is released only after the launch has run (and
    /// host access to them waits for it). The launch is ordered with the work on `stream` only.
    ///
    /// Kernel code is trusted as FFI code is: the crate checks each argument's size against
    /// the parameter's, keeps tracked buffers alive, and cannot check what the kernel does
    /// with them.
    pub fn launch(&self, stream: &Stream, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let device = stream.device();
        let module = match &self.inner.origin {
            KernelOrigin::Module { module } if &module.device == device => module,
            _ => {
                return Err(Error::WrongDevice(format!(
                    "kernel `{}` is not on the stream's device",
                    self.name()
                )))
            }
        };
        self.check_args(args)?;
        self.check_launch(device.limits(), &cfg)?;
        // SAFETY: arguments and shape were just checked against the kernel's layout and the
        // device; the kernel is live (its module is held); the buffers and the module are kept
        // from being freed until the launch has run by the marker noted below.
        unsafe { self.launch_unchecked(stream, cfg, args)? };
        let m = stream.mark()?;
        module.uses.add_marker(&m);
        for a in args {
            if let Some(b) = &a.buffer {
                b.uses.add_marker(&m);
            }
        }
        Ok(())
    }

    /// Launches without checking anything.
    ///
    /// # Safety
    /// `args` match the parameter layout ([`Kernel::check_args`]), the shape is valid
    /// ([`Kernel::check_launch`]), the kernel and the stream are on one device, and the
    /// buffers and the kernel's module stay alive, and pinned memory the kernel uses is not
    /// accessed by the host, until the launch has run (nothing here tracks them).
    pub unsafe fn launch_unchecked(
        &self,
        stream: &Stream,
        cfg: LaunchConfig,
        args: &[KernelArg],
    ) -> Result<()> {
        let Some(raw) = self.inner.raw else {
            return Err(Error::WrongDevice(format!(
                "kernel `{}` was made by a RecordingBackend and has no code",
                self.name()
            )));
        };
        const MAX: usize = 64;
        if args.len() > MAX {
            let mut ptrs: Vec<*mut c_void> = args.iter().map(|a| a.as_ptr()).collect();
            return rt::launch_kernel(
                raw as *const c_void,
                cfg.grid.into(),
                cfg.block.into(),
                ptrs.as_mut_ptr(),
                cfg.shared_mem_bytes as usize,
                stream.raw(),
            );
        }
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX];
        for (p, a) in ptrs.iter_mut().zip(args) {
            *p = a.as_ptr();
        }
        rt::launch_kernel(
            raw as *const c_void,
            cfg.grid.into(),
            cfg.block.into(),
            ptrs.as_mut_ptr(),
            cfg.shared_mem_bytes as usize,
            stream.raw(),
        )
    }
}

// ---- launch shapes -------------------------------------------------------------------------

/// Three dimensions of a grid or block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dim3 {
    /// x
    pub x: u32,
    /// y
    pub y: u32,
    /// z
    pub z: u32,
}

impl From<u32> for Dim3 {
    fn from(x: u32) -> Dim3 {
        Dim3 { x, y: 1, z: 1 }
    }
}
impl From<(u32, u32)> for Dim3 {
    fn from((x, y): (u32, u32)) -> Dim3 {
        Dim3 { x, y, z: 1 }
    }
}
impl From<(u32, u32, u32)> for Dim3 {
    fn from((x, y, z): (u32, u32, u32)) -> Dim3 {
        Dim3 { x, y, z }
    }
}
impl From<Dim3> for sys::dim3 {
    fn from(d: Dim3) -> sys::dim3 {
        sys::dim3 {
            x: d.x,
            y: d.y,
            z: d.z,
        }
    }
}
impl std::fmt::Display for Dim3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({},{},{})", self.x, self.y, self.z)
    }
}

/// A launch shape: grid and block dimensions and dynamic shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LaunchConfig {
    /// Blocks in the grid.
    pub grid: Dim3,
    /// Threads in a block.
    pub block: Dim3,
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A shape with no dynamic shared memory.
    pub fn new(grid: impl Into<Dim3>, block: impl Into<Dim3>) -> Self {
        LaunchConfig {
            grid: grid.into(),
            block: block.into(),
            shared_mem_bytes: 0,
        }
    }

    /// Enough blocks of `block` threads (1D) to cover `n` elements.
    pub fn for_elements(n: u32, block: u32) -> Self {
        LaunchConfig::new(n.div_ceil(block.max(1)).max(1), block)
    }

    /// The same shape with `bytes` of dynamic shared memory.
    pub fn with_shared_mem(mut self, bytes: u32) -> Self {
        self.shared_mem_bytes = bytes;
        self
    }
}

// ---- arguments -----------------------------------------------------------------------------

const INLINE: usize = 64;

#[derive(Clone)]
enum ArgBytes {
    Inline([u64; INLINE / 8], usize),
    Heap(Box<[u8]>),
}

/// One kernel argument: a value's bytes, or a device buffer (passed as its address and kept
/// alive by any graph node that uses it).
///
/// Made with `KernelArg::from(value)` / `(&buffer).into()`, or all at once with
/// [`args!`](crate::args). No heap allocation for values up to 64 bytes.
#[derive(Clone)]
pub struct KernelArg {
    bytes: ArgBytes,
    type_name: &'static str,
    pub(crate) buffer: Option<Arc<Allocation>>,
}

impl std::fmt::Debug for KernelArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl KernelArg {
    /// An argument holding a copy of `value`'s bytes.
    pub fn value<T: DeviceRepr>(value: T) -> Self {
        // `Pod`: no padding, so every byte is initialised.
        let src = bytemuck::bytes_of(&value);
        let size = src.len();
        let bytes = if size <= INLINE {
            let mut words = [0u64; INLINE / 8];
            bytemuck::cast_slice_mut::<u64, u8>(&mut words)[..size].copy_from_slice(src);
            ArgBytes::Inline(words, size)
        } else {
            ArgBytes::Heap(src.into())
        };
        KernelArg {
            bytes,
            type_name: std::any::type_name::<T>(),
            buffer: None,
        }
    }

    /// An argument passing a buffer's device address (kept alive by whatever uses the
    /// argument).
    pub fn buffer<T: DeviceRepr>(buffer: &DeviceBuffer<T>) -> Self {
        let mut a = KernelArg::value(buffer.alloc.ptr);
        a.type_name = std::any::type_name::<DeviceBuffer<T>>();
        a.buffer = Some(buffer.alloc.clone());
        a
    }

    /// An argument passing the address of a region's first byte (kept alive like a buffer's).
    /// The region's bounds are the kernel's business; only device memory is accepted when the
    /// argument is checked.
    pub fn region(region: &Region) -> Self {
        let mut a = KernelArg::value(region.raw_addr());
        a.type_name = "Region";
        a.buffer = Some(region.alloc.clone());
        a
    }

    /// The argument's size in bytes.
    pub fn size(&self) -> usize {
        match &self.bytes {
            ArgBytes::Inline(_, n) => *n,
            ArgBytes::Heap(b) => b.len(),
        }
    }

    /// The argument's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match &self.bytes {
            ArgBytes::Inline(w, n) => {
                // SAFETY: `w` is INLINE bytes long and `n <= INLINE`.
                unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), *n) }
            }
            ArgBytes::Heap(b) => b,
        }
    }

    fn as_ptr(&self) -> *mut c_void {
        self.as_bytes().as_ptr() as *mut c_void
    }

    pub(crate) fn describe(&self) -> String {
        let short = self.type_name.rsplit("::").next().unwrap_or(self.type_name);
        format!("{short}, {} bytes", self.size())
    }

    /// Whether this argument passes a buffer.
    pub fn is_buffer(&self) -> bool {
        self.buffer.is_some()
    }
}

impl<T: DeviceRepr> From<T> for KernelArg {
    fn from(v: T) -> Self {
        KernelArg::value(v)
    }
}

impl<T: DeviceRepr> From<&DeviceBuffer<T>> for KernelArg {
    fn from(b: &DeviceBuffer<T>) -> Self {
        KernelArg::buffer(b)
    }
}

impl From<&Region> for KernelArg {
    fn from(r: &Region) -> Self {
        KernelArg::region(r)
    }
}

/// Builds an array of [`KernelArg`]s: `args![&buf, 2.0f32, n as u32]`.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => {
        [$($crate::KernelArg::from($a)),*]
    };
}

/// Kernel arguments packed at the kernel's parameter offsets, with the pointer array CUDA
/// reads (`kernelParams`). Updating an argument rewrites bytes in place: the pointers do not
/// change and nothing is allocated.
pub(crate) struct PackedArgs {
    storage: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
    layout: Arc<KernelInner>,
    /// The buffers the arguments refer to, one slot per parameter.
    pub(crate) buffers: Box<[Option<Arc<Allocation>>]>,
}

// SAFETY: the raw pointers point into `storage`, owned by the same value.
unsafe impl Send for PackedArgs {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for PackedArgs {}

impl PackedArgs {
    /// Packs `args`, which must already match `kernel`'s layout.
    pub(crate) fn new(kernel: &Kernel, args: &[KernelArg]) -> Self {
        let params = &kernel.inner.params;
        let total = params.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
        let storage = vec![0u64; total.div_ceil(8).max(1)].into_boxed_slice();
        let mut packed = PackedArgs {
            ptrs: vec![std::ptr::null_mut(); params.len()].into_boxed_slice(),
            storage,
            layout: kernel.inner.clone(),
            buffers: vec![None; params.len()].into_boxed_slice(),
        };
        packed.fix_ptrs();
        for (i, a) in args.iter().enumerate() {
            packed.set(i, a);
        }
        packed
    }

    fn fix_ptrs(&mut self) {
        let base = self.storage.as_mut_ptr().cast::<u8>();
        for (p, info) in self.ptrs.iter_mut().zip(&self.layout.params) {
            // SAFETY: every offset is inside `storage`, which was sized for the layout.
            *p = unsafe { base.add(info.offset) }.cast();
        }
    }

    /// Writes argument `i` (already checked against parameter `i`). Returns the buffer it
    /// replaced, if any.
    pub(crate) fn set(&mut self, i: usize, a: &KernelArg) -> Option<Arc<Allocation>> {
        let info = self.layout.params[i];
        // The same buffer again (the common case when updating a value next to it): no
        // reference-count traffic.
        let same = match (&self.buffers[i], &a.buffer) {
            (Some(old), Some(new)) => Arc::ptr_eq(old, new),
            (None, None) => true,
            _ => false,
        };
        let bytes = a.as_bytes();
        debug_assert_eq!(bytes.len(), info.size);
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside `storage`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.storage.as_mut_ptr().cast::<u8>().add(info.offset),
                info.size,
            )
        };
        if same {
            return None;
        }
        std::mem::replace(&mut self.buffers[i], a.buffer.clone())
    }

    /// Overwrites parameter `i` with `bytes` (exactly its size), without touching buffers.
    pub(crate) fn set_bytes(&mut self, i: usize, bytes: &[u8]) {
        let info = self.layout.params[i];
        assert_eq!(bytes.len(), info.size, "parameter {i} size");
        // SAFETY: parameter `i` occupies `info.size` bytes at `info.offset` inside `storage`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.storage.as_mut_ptr().cast::<u8>().add(info.offset),
                info.size,
            )
        };
    }

    /// A copy of the packed arguments in `scratch`, with `replace(i)`'s bytes (exactly
    /// parameter `i`'s size) instead of argument `i` where it gives some; returns the
    /// `kernelParams` array pointing into `scratch`. Allocates only when `scratch` grows.
    pub(crate) fn staged<'r>(
        &self,
        scratch: &mut ArgScratch,
        replace: &dyn Fn(usize) -> Option<&'r [u8]>,
    ) -> *mut *mut c_void {
        scratch.storage.clear();
        scratch.storage.extend_from_slice(&self.storage);
        let base = scratch.storage.as_mut_ptr().cast::<u8>();
        scratch.ptrs.clear();
        for (i, info) in self.layout.params.iter().enumerate() {
            // SAFETY: every offset is inside the copy of `storage`, sized for the layout.
            let p = unsafe { base.add(info.offset) };
            if let Some(bytes) = replace(i) {
                assert_eq!(bytes.len(), info.size, "parameter {i} size");
                // SAFETY: parameter `i` occupies `info.size` bytes at `p`.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, info.size) };
            }
            scratch.ptrs.push(p.cast());
        }
        scratch.ptrs.as_mut_ptr()
    }

    /// The `kernelParams` array.
    pub(crate) fn kernel_params(&self) -> *mut *mut c_void {
        self.ptrs.as_ptr() as *mut *mut c_void
    }

    /// Bytes of parameter `i`.
    pub(crate) fn param_bytes(&self, i: usize) -> &[u8] {
        let info = self.layout.params[i];
        // SAFETY: in bounds as in `set`.
        unsafe {
            std::slice::from_raw_parts(
                self.storage.as_ptr().cast::<u8>().add(info.offset),
                info.size,
            )
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.ptrs.len()
    }
}

impl Clone for PackedArgs {
    fn clone(&self) -> Self {
        let mut c = PackedArgs {
            storage: self.storage.clone(),
            ptrs: self.ptrs.clone(),
            layout: self.layout.clone(),
            buffers: self.buffers.clone(),
        };
        c.fix_ptrs();
        c
    }
}

/// Room to stage kernel parameters for an update before the node's own copy changes (so a
/// refused update leaves the node as CUDA still has it).
#[derive(Default)]
pub(crate) struct ArgScratch {
    storage: Vec<u64>,
    ptrs: Vec<*mut c_void>,
}

// SAFETY: the pointers point into `storage`, owned by the same value, and are only written and
// read through `&mut self`.
unsafe impl Send for ArgScratch {}

/// Host memory can't be a kernel argument; this exists so the error is a clear compile-time
/// one (no `From<&HostBuffer>` for `KernelArg`).
#[allow(dead_code)] // reason: documents a deliberate absence
fn _no_host_buffer_args(_: &HostBuffer<u8>) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_pack_at_parameter_offsets() {
        let k = Kernel::recording("k", &[4, 8, 2], 1);
        assert_eq!(
            k.params(),
            &[
                ParamInfo { offset: 0, size: 4 },
                ParamInfo { offset: 8, size: 8 },
                ParamInfo {
                    offset: 16,
                    size: 2
                }
            ]
        );
        let args = crate::args![1.5f32, 7u64, 3u16];
        k.check_args(&args).unwrap();
        let mut p = PackedArgs::new(&k, &args);
        assert_eq!(p.param_bytes(0), &1.5f32.to_ne_bytes());
        assert_eq!(p.param_bytes(1), &7u64.to_ne_bytes());
        let ptrs_before = p.kernel_params();
        p.set(1, &KernelArg::from(9u64));
        assert_eq!(p.param_bytes(1), &9u64.to_ne_bytes());
        assert_eq!(
            p.kernel_params(),
            ptrs_before,
            "update must not move the pointer array"
        );
        let c = p.clone();
        assert_eq!(c.param_bytes(1), &9u64.to_ne_bytes());
        // SAFETY: reading the first pointer of the clone's own array.
        let first = unsafe { *c.kernel_params() };
        assert_eq!(first as *const u8, c.param_bytes(0).as_ptr());
    }

    #[test]
    fn wrong_count_and_size_are_named() {
        let k = Kernel::recording("saxpy", &[4, 8], 1);
        let e = k.check_args(&crate::args![1.0f32]).unwrap_err().to_string();
        assert!(
            e.contains("saxpy") && e.contains("takes 2 arguments but 1"),
            "{e}"
        );
        let e = k
            .check_args(&crate::args![1.0f32, 2u32])
            .unwrap_err()
            .to_string();
        assert!(e.contains("argument 1 is 4 bytes (u32"), "{e}");
    }

    #[test]
    fn big_values_go_to_the_heap_and_keep_their_bytes() {
        let v = [7u8; 100];
        let a = KernelArg::from(v);
        assert_eq!(a.size(), 100);
        assert!(a.as_bytes().iter().all(|&b| b == 7));
    }

    #[test]
    fn launch_shapes_are_checked() {
        let k = Kernel::recording("k", &[], 1);
        let l = DeviceLimits::hopper();
        assert!(k.check_launch(&l, &LaunchConfig::new(10, 256)).is_ok());
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, 2048))
            .unwrap_err()
            .to_string();
        assert!(e.contains("block.x = 2048"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, (32, 32, 2)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("2048 threads per block"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(0, 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("zero"), "{e}");
        let e = k
            .check_launch(&l, &LaunchConfig::new(1, 1).with_shared_mem(100_000))
            .unwrap_err()
            .to_string();
        assert!(e.contains("dynamic shared memory"), "{e}");
        assert_eq!(LaunchConfig::for_elements(1000, 256).grid.x, 4);
    }
}
