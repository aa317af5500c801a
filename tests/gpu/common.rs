//! The one helper that decides whether a GPU test runs ([`gpu_test`]), and the setup the tests
//! share: kernels from [`KERNELS`], launching an `Exec` and waiting for it, comparing floats.

use std::sync::OnceLock;

use cudagraph::{Device, Exec, Kernel, Module, Stream};
use libtest_mimic::{Completion, Trial};

/// What a GPU test gets.
pub struct Gpu {
    pub device: Device,
    pub stream: Stream,
}

impl Gpu {
    /// Compiles and loads `source` for this GPU.
    pub fn module(&self, source: &str) -> anyhow::Result<Module> {
        Ok(Module::from_source(&self.device, source)?)
    }

    /// The kernel `name` of [`KERNELS`] (compiled and loaded for this GPU; the kernel keeps
    /// its module alive).
    pub fn kernel(&self, name: &str) -> anyhow::Result<Kernel> {
        Ok(self.module(KERNELS)?.kernel(name)?)
    }

    /// The kernels `names` of [`KERNELS`], from one module.
    pub fn kernels<const N: usize>(&self, names: [&str; N]) -> anyhow::Result<[Kernel; N]> {
        let m = self.module(KERNELS)?;
        let mut kernels = Vec::with_capacity(N);
        for name in names {
            kernels.push(m.kernel(name)?);
        }
        Ok(kernels
            .try_into()
            .unwrap_or_else(|_| unreachable!("one kernel per name")))
    }

    /// Launches `exec` on this GPU's stream, then waits for its launches
    /// (`Exec::synchronize`).
    pub fn launch_and_wait(&self, exec: &mut Exec) -> anyhow::Result<()> {
        exec.launch(&self.stream)?;
        exec.synchronize()?;
        Ok(())
    }
}

fn device() -> &'static Result<Device, String> {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    DEVICE.get_or_init(|| Device::get(0).map_err(|e| e.to_string()))
}

fn gpu_required() -> bool {
    std::env::var("CUDAGRAPH_REQUIRE_GPU").is_ok_and(|v| v == "1")
}

/// How many GPUs the multi-GPU tests must find (`CUDAGRAPH_REQUIRE_GPUS=<n>`; 0 when unset):
/// a test needing at most that many fails, rather than being ignored, where fewer GPUs are
/// visible or they lack what it needs (peer access).
fn gpus_required() -> usize {
    std::env::var("CUDAGRAPH_REQUIRE_GPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// What a multi-GPU test returns (as its error) when the GPUs it found cannot run it, such as
/// two GPUs without peer access: [`gpus_test`] reports the test *ignored* with this reason,
/// or failed under `CUDAGRAPH_REQUIRE_GPUS`.
#[derive(Debug)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Unsupported {}

/// A test of the suite, registered next to its code by [`register!`].
pub struct Registered {
    /// The test's name (`module::what_it_checks`).
    pub name: &'static str,
    /// Makes the trial (through [`gpu_test`], [`gpus_test`], [`nccl_test`] or [`nvrtc_test`]).
    pub make: fn() -> Trial,
}

/// Every registered test (collected at link time).
#[linkme::distributed_slice]
pub static TESTS: [Registered];

/// Registers the function below as a test of the suite, with its name and the helper that runs
/// it: `register!(gpu "dag::x" => x);` (one GPU), `register!(gpus 2 "placement::x" => x);`,
/// `register!(nccl "nccl::x" => x);`, `register!(nvrtc "sources::x" => x);`.
#[allow(unused_macros)] // reason: tests/no_alloc.rs shares this file and registers nothing
macro_rules! register {
    (gpu $name:literal => $f:ident) => {
        register!(@ $name, crate::common::gpu_test($name, $f));
    };
    (gpus $needs:literal $name:literal => $f:ident) => {
        register!(@ $name, crate::common::gpus_test($name, $needs, $f));
    };
    (nccl $name:literal => $f:ident) => {
        register!(@ $name, crate::common::nccl_test($name, $f));
    };
    (nvrtc $name:literal => $f:ident) => {
        register!(@ $name, crate::common::nvrtc_test($name, $f));
    };
    (@ $name:literal, $trial:expr) => {
        const _: () = {
            fn make() -> libtest_mimic::Trial {
                $trial
            }
            #[linkme::distributed_slice(crate::common::TESTS)]
            static TEST: crate::common::Registered = crate::common::Registered { name: $name, make };
        };
    };
}

/// A test that needs a GPU: run when there is one, *ignored* (with the reason) when there is
/// none, and failed when there is none but `CUDAGRAPH_REQUIRE_GPU=1`.
pub fn gpu_test(name: &str, f: fn(&Gpu) -> anyhow::Result<()>) -> Trial {
    gpus_test(name, 1, f)
}

/// A test that needs `needs` GPUs (its [`Gpu`] is device 0; it opens the others itself): run
/// when that many are visible. With no usable GPU, as [`gpu_test`]. With fewer GPUs than it
/// needs, or GPUs that cannot run it (it returns [`Unsupported`]), *ignored* with the reason —
/// also under `CUDAGRAPH_REQUIRE_GPU=1`, which asks for one GPU — and failed when
/// `CUDAGRAPH_REQUIRE_GPUS` (a number) is at least `needs`: set `CUDAGRAPH_REQUIRE_GPUS=2` on a
/// machine with two GPUs so that the two-GPU tests cannot pass without running.
pub fn gpus_test(name: &str, needs: usize, f: fn(&Gpu) -> anyhow::Result<()>) -> Trial {
    Trial::ignorable_test(name, move || {
        let device = match device() {
            Ok(device) => device,
            Err(reason) if gpu_required() || gpus_required() >= needs => {
                let by = if gpu_required() {
                    "CUDAGRAPH_REQUIRE_GPU=1".to_string()
                } else {
                    format!("CUDAGRAPH_REQUIRE_GPUS={}", gpus_required())
                };
                return Err(format!("{by} but the GPU cannot be used: {reason}").into());
            }
            Err(reason) => return Ok(Completion::ignored_with(format!("no GPU: {reason}"))),
        };
        // Fewer GPUs than needed, or GPUs that cannot run the test: ignored, unless required.
        let cannot = |reason: String| {
            if gpus_required() >= needs {
                Err(format!("CUDAGRAPH_REQUIRE_GPUS={} but {reason}", gpus_required()).into())
            } else {
                Ok(Completion::ignored_with(format!(
                    "{reason} (CUDAGRAPH_REQUIRE_GPUS={needs} makes this a failure)"
                )))
            }
        };
        if needs > 1 {
            let count = Device::count().map_err(|e| e.to_string())?;
            if count < needs {
                return cannot(format!("it needs {needs} GPUs; {count} visible"));
            }
        }
        let stream = Stream::new(device).map_err(|e| e.to_string())?;
        let gpu = Gpu {
            device: device.clone(),
            stream,
        };
        match f(&gpu) {
            Ok(()) => Ok(Completion::Completed),
            Err(e) => match e.downcast::<Unsupported>() {
                Ok(Unsupported(reason)) if needs > 1 => cannot(reason),
                Ok(Unsupported(reason)) => Err(format!("unsupported: {reason}").into()),
                Err(e) => Err(format!("{e:#}").into()),
            },
        }
    })
    .with_kind("gpu")
}

/// Whether NCCL must be usable where a GPU is required: yes, unless
/// `CUDAGRAPH_NCCL_OPTIONAL=1` (the GPU machines this suite is run on have it, from the
/// `nvidia-nccl-cu13` Python wheel or a system package).
fn nccl_required() -> bool {
    gpu_required() && !std::env::var("CUDAGRAPH_NCCL_OPTIONAL").is_ok_and(|v| v == "1")
}

/// A GPU test that also needs NCCL: as [`gpu_test`], and without a loadable NCCL it is
/// ignored (with the paths tried), or failed when NCCL is required (`CUDAGRAPH_REQUIRE_GPU=1`
/// without `CUDAGRAPH_NCCL_OPTIONAL=1`).
pub fn nccl_test(name: &str, f: fn(&Gpu) -> anyhow::Result<()>) -> Trial {
    match cudagraph::load::nccl() {
        Ok(_) => gpu_test(name, f),
        Err(e) => {
            let reason = e.to_string();
            Trial::ignorable_test(name, move || {
                if nccl_required() {
                    Err(format!(
                        "CUDAGRAPH_REQUIRE_GPU=1 expects NCCL (set CUDAGRAPH_NCCL_OPTIONAL=1 \
                         where it is not installed): {reason}"
                    )
                    .into())
                } else {
                    Ok(Completion::ignored_with(format!("no NCCL: {reason}")))
                }
            })
            .with_kind("gpu")
        }
    }
}

/// A test that needs NVRTC but no GPU (NVRTC compiles on the host): run where NVRTC can be
/// loaded, *ignored* with the reason elsewhere, and failed without NVRTC when
/// `CUDAGRAPH_REQUIRE_NVRTC=1` or `CUDAGRAPH_REQUIRE_GPU=1` (`.ci/run` installs NVRTC from its
/// wheel and sets the former).
pub fn nvrtc_test(name: &str, f: fn() -> anyhow::Result<()>) -> Trial {
    Trial::ignorable_test(name, move || match cudagraph::nvrtc_version() {
        Ok(_) => {
            f().map_err(|e| format!("{e:#}"))?;
            Ok(Completion::Completed)
        }
        Err(e)
            if gpu_required()
                || std::env::var("CUDAGRAPH_REQUIRE_NVRTC").is_ok_and(|v| v == "1") =>
        {
            Err(format!("NVRTC is required but cannot be loaded: {e}").into())
        }
        Err(e) => Ok(Completion::ignored_with(format!("no NVRTC: {e}"))),
    })
    .with_kind("nvrtc")
}

/// Asserts two float slices agree within `tol` (absolute + relative to the reference).
pub fn assert_close(got: &[f32], want: &[f32], tol: f32) -> anyhow::Result<()> {
    anyhow::ensure!(
        got.len() == want.len(),
        "lengths {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        anyhow::ensure!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w} (tolerance {tol})"
        );
    }
    Ok(())
}

/// Kernels shared by the tests.
pub const KERNELS: &str = r#"
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
extern "C" __global__ void axpy(float* y, float a, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
extern "C" __global__ void inc(unsigned int* c) { atomicAdd(c, 1u); }
extern "C" __global__ void write_slot(unsigned int* out, unsigned int slot, unsigned int value) {
    out[slot] = value;
}
extern "C" __global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}
"#;
