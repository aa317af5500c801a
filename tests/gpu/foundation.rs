//! GPU tests of the foundation: loading, devices, memory, NVRTC, stream launches.

use anyhow::{ensure, Context};
use cudagraph::result::runtime as rt;
use cudagraph::{
    args, compile, CompileOptions, Device, DeviceBuffer, Error, HostBuffer, KernelArg,
    LaunchConfig, Module, ParamInfo, ParamSource, Stream,
};

use crate::common::{assert_close, Gpu, KERNELS};

register!(gpu "foundation::versions_and_properties" => versions_and_properties);
fn versions_and_properties(gpu: &Gpu) -> anyhow::Result<()> {
    let (runtime, driver) = cudagraph::versions()?;
    ensure!(runtime.major >= 13, "runtime {runtime}");
    ensure!(driver >= runtime, "driver {driver} < runtime {runtime}");
    let (nv_major, _) = cudagraph::nvrtc_version()?;
    ensure!(nv_major >= 13, "nvrtc {nv_major}");
    let p = gpu.device.properties();
    println!(
        "device 0: {} cc {:?}, {} SMs, {} GiB, runtime {}, driver {}",
        p.name,
        p.limits.compute_capability,
        p.multiprocessor_count,
        p.total_memory >> 30,
        p.runtime_version,
        p.driver_version
    );
    ensure!(!p.name.is_empty());
    // The driver the crate updates kernel nodes through loads, and names its errors.
    cudagraph::load::driver()?;
    let e = cudagraph::result::driver::error(
        "cuGraphExecKernelNodeSetParams_v2",
        cudagraph::sys::CUresult::CUDA_ERROR_INVALID_HANDLE,
    );
    ensure!(
        e.to_string().contains("CUDA_ERROR_INVALID_HANDLE (400)"),
        "driver error text: {e}"
    );
    ensure!(p.limits.compute_capability.0 >= 5);
    ensure!(p.multiprocessor_count > 0);
    ensure!(p.limits.max_threads_per_block >= 512);
    ensure!(p.limits.max_grid_dim[0] >= 65535);
    ensure!(p.limits.max_shared_mem_per_block_optin >= p.limits.max_shared_mem_per_block);
    ensure!(Device::count()? >= 1);
    Ok(())
}

register!(gpu "foundation::missing_device_is_typed" => missing_device_is_typed);
fn missing_device_is_typed(_gpu: &Gpu) -> anyhow::Result<()> {
    match Device::get(10_000) {
        Err(Error::NoDevice(msg)) => ensure!(msg.contains("10000"), "{msg}"),
        other => anyhow::bail!("expected NoDevice, got {other:?}"),
    }
    Ok(())
}

register!(gpu "foundation::memory_round_trips" => memory_round_trips);
fn memory_round_trips(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let data: Vec<f32> = (0..10_000).map(|i| i as f32 * 0.5).collect();
    let a = DeviceBuffer::from_slice(d, &data)?; // H2D
    ensure!(a.to_vec()? == data, "H2D/D2H round trip"); // D2H
    let b = DeviceBuffer::<f32>::zeros(d, data.len())?;
    ensure!(b.to_vec()?.iter().all(|&x| x == 0.0), "zeros");
    b.copy_from_device(&a)?; // D2D
    ensure!(b.to_vec()? == data, "D2D");
    b.memset_bytes(0xff)?;
    ensure!(
        b.to_vec()?.iter().all(|x| x.to_bits() == 0xffff_ffff),
        "memset"
    );
    let h = HostBuffer::from_slice(d, &data)?;
    ensure!(h.to_vec()? == data, "pinned round trip");
    let c = DeviceBuffer::<f32>::zeros(d, data.len())?;
    c.copy_from_host_async(&h, &gpu.stream)?;
    gpu.stream.synchronize()?;
    ensure!(c.to_vec()? == data, "async H2D");
    let e = a.copy_from_slice(&data[..10]).unwrap_err();
    ensure!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    let empty = DeviceBuffer::<u8>::zeros(d, 0)?;
    ensure!(empty.to_vec()?.is_empty());
    Ok(())
}

register!(gpu "foundation::a_range_copied_to_the_host" => a_range_copied_to_the_host);
/// `copy_range_to_host_async` writes exactly the range into the same elements of the pinned
/// buffer; a range outside the buffer is refused before anything is queued.
fn a_range_copied_to_the_host(gpu: &Gpu) -> anyhow::Result<()> {
    let d = &gpu.device;
    let data: Vec<u32> = (0..1000).collect();
    let src = DeviceBuffer::from_slice(d, &data)?;
    let mut h = HostBuffer::from_slice(d, &vec![u32::MAX; 1000])?;
    src.copy_range_to_host_async(300..700, &mut h, &gpu.stream)?;
    let got = h.to_vec()?;
    for (i, v) in got.iter().enumerate() {
        let want = if (300..700).contains(&i) {
            i as u32
        } else {
            u32::MAX
        };
        ensure!(*v == want, "element {i}: {v}, want {want}");
    }
    for bad in [990..1001, 1001..1002] {
        let e = src
            .copy_range_to_host_async(bad.clone(), &mut h, &gpu.stream)
            .unwrap_err();
        ensure!(matches!(e, Error::OutOfBounds { .. }), "{bad:?}: {e}");
    }
    let mut short = HostBuffer::<u32>::zeros(d, 999)?;
    let e = src
        .copy_range_to_host_async(0..10, &mut short, &gpu.stream)
        .unwrap_err();
    ensure!(matches!(e, Error::OutOfBounds { .. }), "{e}");
    src.copy_range_to_host_async(5..5, &mut h, &gpu.stream)?;
    Ok(())
}

register!(gpu "foundation::compile_and_launch" => compile_and_launch);
fn compile_and_launch(gpu: &Gpu) -> anyhow::Result<()> {
    let axpy = gpu.kernel("axpy")?;
    let n = 100_000usize;
    let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32).collect();
    let y0: Vec<f32> = (0..n).map(|i| (i % 13) as f32 - 6.0).collect();
    let xd = DeviceBuffer::from_slice(&gpu.device, &x)?;
    let yd = DeviceBuffer::from_slice(&gpu.device, &y0)?;
    axpy.launch(
        &gpu.stream,
        LaunchConfig::for_elements(n as u32, 256),
        &args![&yd, 3.0f32, &xd, n as i32],
    )?;
    gpu.stream.synchronize()?;
    let want: Vec<f32> = y0.iter().zip(&x).map(|(y, x)| y + 3.0 * x).collect();
    assert_close(&yd.to_vec()?, &want, 0.0)
}

register!(gpu "foundation::parameter_layout" => parameter_layout);
fn parameter_layout(gpu: &Gpu) -> anyhow::Result<()> {
    let m = gpu
        .module(r#"extern "C" __global__ void f(float* p, float a, int n, double d, char c) {}"#)?;
    let k = m.kernel("f")?;
    let sizes: Vec<usize> = k.params().iter().map(|p| p.size).collect();
    let offsets: Vec<usize> = k.params().iter().map(|p| p.offset).collect();
    ensure!(sizes == [8, 4, 4, 8, 1], "sizes {sizes:?}");
    ensure!(offsets == [0, 8, 12, 16, 24], "offsets {offsets:?}");
    ensure!(k.max_threads_per_block() >= 512);
    // No refused call stays behind as the thread's last error for the caller's own error
    // checks (the layout is read from the cubin here; probed layouts clear CUDA's refusal:
    // `parameter_layouts_against_a_refused_probe`).
    // SAFETY: `cudaGetLastError` takes no arguments; the runtime is loaded (a module is).
    let last = unsafe { cudagraph::result::runtime::get_last_error() };
    ensure!(last.is_ok(), "loading a kernel left a last error: {last:?}");
    Ok(())
}

register!(gpu "foundation::a_missing_kernel_is_refused" => a_missing_kernel_is_refused);
/// CUDA refuses the name (`cudaLibraryGetKernel`, asked on purpose: `refused` in the name keeps
/// the test out of the sanitizer runs), and the error is typed.
fn a_missing_kernel_is_refused(gpu: &Gpu) -> anyhow::Result<()> {
    let m = gpu.module(r#"extern "C" __global__ void f(float* p) {}"#)?;
    let e = m.kernel("nope").unwrap_err();
    ensure!(matches!(e, Error::KernelNotFound { .. }), "{e}");
    Ok(())
}

/// Kernels of [`parameter_layouts_against_a_refused_probe`]: `big`'s parameters (over 4 KiB) are
/// described by `KPARAM_INFO_V2` records, the others' by `KPARAM_INFO`.
pub const LAYOUTS: &str = r#"
struct S12 { int a, b, c; };
struct alignas(16) S16 { float x, y, z, w; int n; };
struct Big { char c[8000]; };
extern "C" __global__ void mixed(float* p, unsigned char a, unsigned short b,
                                 unsigned long long d, double e, S12 s, S16 u) {}
extern "C" __global__ void grid(const __grid_constant__ S12 t, int* o) { o[0] = t.a; }
extern "C" __global__ void none() {}
extern "C" __global__ void big(Big b, int* o) { o[0] = b.c[5]; }
"#;

/// A PTX module (the layout is then read from its `.entry` declaration).
const PTX: &str = ".version 8.0\n.target sm_75\n.address_size 64\n\
    .visible .entry ptx_kernel(.param .u64 p, .param .u32 n) { ret; }\n\0";

register!(gpu "foundation::parameter_layouts_against_a_refused_probe" => parameter_layouts_against_a_refused_probe);
/// Layouts read from the cubin (and from PTX) equal CUDA's answers, parameter by parameter;
/// CUDA refuses the index past the last (asked on purpose: `probe` in the name keeps the test
/// out of the sanitizer runs, which list the refusal).
fn parameter_layouts_against_a_refused_probe(gpu: &Gpu) -> anyhow::Result<()> {
    let layout = |v: &[(usize, usize)]| -> Vec<ParamInfo> {
        v.iter()
            .map(|&(offset, size)| ParamInfo { offset, size })
            .collect()
    };
    let want = [
        (
            "mixed",
            layout(&[
                (0, 8),
                (8, 1),
                (10, 2),
                (16, 8),
                (24, 8),
                (32, 12),
                (48, 32),
            ]),
            ParamSource::Cubin,
        ),
        ("grid", layout(&[(0, 12), (16, 8)]), ParamSource::Cubin),
        ("none", layout(&[]), ParamSource::Cubin),
        ("big", layout(&[(0, 8000), (8000, 8)]), ParamSource::Cubin),
    ];
    let m = gpu.module(LAYOUTS)?;
    // SAFETY: `cudaGetLastError` takes no arguments; the runtime is loaded (a module is).
    let _ = unsafe { rt::get_last_error() };
    let mut kernels = Vec::new();
    for (name, params, source) in &want {
        let k = m.kernel(name)?;
        ensure!(
            k.param_source() == *source,
            "{name}: {:?}",
            k.param_source()
        );
        ensure!(k.params() == &params[..], "{name}: {:?}", k.params());
        // Read from the cubin, the layout cost no refused call; probed, the refusal was
        // cleared.
        // SAFETY: as above.
        let last = unsafe { rt::get_last_error() };
        ensure!(last.is_ok(), "{name}: loading left a last error: {last:?}");
        kernels.push(k);
    }
    // CUDA's own answers for the same image, parameter by parameter, and one past the last.
    let image = compile(Some(&gpu.device), LAYOUTS, &CompileOptions::default())?.image;
    // SAFETY: the image is a cubin for this device (its module loaded above, which also made
    // the device current on this thread); the library is unloaded below, and nothing else
    // uses it.
    let library = unsafe { rt::library_load_data(&image)? };
    let check = || -> anyhow::Result<()> {
        for k in &kernels {
            let name = std::ffi::CString::new(k.name())?;
            // SAFETY: the library is loaded.
            let func = unsafe { rt::library_get_kernel(library, &name)? } as *const _;
            for i in 0..=k.params().len() {
                let want = k.params().get(i).map(|p| (p.offset, p.size));
                // SAFETY: `func` is a live kernel of the loaded library.
                let got = unsafe { rt::func_param_info(func, i)? };
                ensure!(got == want, "{}: parameter {i}: CUDA {got:?}", k.name());
            }
        }
        Ok(())
    };
    let checked = check();
    // SAFETY: loaded above; no work of it was queued.
    unsafe { rt::library_unload(library)? };
    checked?;

    // A PTX module: read from its declaration, with the same answer.
    let ptx = Module::load(&gpu.device, PTX.as_bytes(), Default::default())?;
    let k = ptx.kernel("ptx_kernel")?;
    ensure!(k.param_source() == ParamSource::Ptx);
    ensure!(
        k.params() == &layout(&[(0, 8), (8, 4)])[..],
        "{:?}",
        k.params()
    );
    Ok(())
}

register!(gpu "foundation::a_fatbin_modules_layouts_come_from_its_images" => a_fatbin_modules_layouts_come_from_its_images);
/// A module loaded from a fatbin (CUDA 13.0's `fatbinary`: cubins for `sm_90` and `sm_100`
/// stored as they are, the `compute_90` PTX zstd-compressed; `src/kernel/fatbin/`) reads each
/// kernel's layout from its images, confirmed by CUDA with no refused call, and runs.
fn a_fatbin_modules_layouts_come_from_its_images(gpu: &Gpu) -> anyhow::Result<()> {
    const FATBIN: &[u8] = include_bytes!("../../src/kernel/fatbin/default.fatbin");
    let m = Module::load(&gpu.device, FATBIN, Default::default())?;
    // SAFETY: `cudaGetLastError` takes no arguments; the runtime is loaded (a module is).
    let _ = unsafe { rt::get_last_error() };
    let k = m.kernel("scale")?;
    // SAFETY: as above.
    let last = unsafe { rt::get_last_error() };
    ensure!(last.is_ok(), "loading left a last error: {last:?}");
    ensure!(
        k.param_source() == ParamSource::Fatbin,
        "{:?}",
        k.param_source()
    );
    let want = [(0, 8), (8, 4), (16, 8), (24, 4)].map(|(offset, size)| ParamInfo { offset, size });
    ensure!(k.params() == &want[..], "{:?}", k.params());
    // `scale(x, a, n, flag)`: x[i] *= a for i < n when flag is set.
    let n = 1000usize;
    let x = DeviceBuffer::from_slice(&gpu.device, &vec![2.0f32; n])?;
    let stream = Stream::new(&gpu.device)?;
    k.launch(
        &stream,
        LaunchConfig::new(n.div_ceil(256) as u32, 256),
        &args![&x, 1.5f32, n as u64, 1i32],
    )?;
    stream.synchronize()?;
    ensure!(x.to_vec()?.iter().all(|&v| v == 3.0), "scale did not run");
    Ok(())
}

register!(gpu "foundation::compile_error_has_log" => compile_error_has_log);
fn compile_error_has_log(gpu: &Gpu) -> anyhow::Result<()> {
    let opts = CompileOptions {
        name: "broken.cu".into(),
        ..Default::default()
    };
    let e = Module::from_source_with(
        &gpu.device,
        "extern \"C\" __global__ void k(int* p) { p[0] = undefined_thing; }",
        &opts,
    )
    .unwrap_err();
    match &e {
        Error::Compile { program, log } => {
            ensure!(program == "broken.cu");
            ensure!(log.contains("undefined_thing"), "log: {log}");
        }
        other => anyhow::bail!("expected a compile error, got {other:?}"),
    }
    ensure!(e.to_string().contains("undefined_thing"));
    Ok(())
}

register!(gpu "foundation::wrong_arguments_rejected" => wrong_arguments_rejected);
fn wrong_arguments_rejected(gpu: &Gpu) -> anyhow::Result<()> {
    let scale = gpu.kernel("scale")?;
    let x = DeviceBuffer::<f32>::zeros(&gpu.device, 16)?;
    let cfg = LaunchConfig::new(1, 16);
    let e = scale
        .launch(&gpu.stream, cfg, &args![&x, 2.0f32])
        .unwrap_err();
    ensure!(matches!(e, Error::KernelArgs { node: None, .. }), "{e:?}");
    ensure!(
        e.to_string() == "kernel `scale` takes 3 arguments but 2 were given",
        "{e}"
    );
    let e = scale
        .launch(&gpu.stream, cfg, &args![&x, 2.0f64, 16i32])
        .unwrap_err();
    ensure!(
        e.to_string()
            .contains("argument 1 is 8 bytes (f64, 8 bytes) but parameter 1 is 4 bytes"),
        "{e}"
    );
    // Pointers go through tracked types: a region of device memory is accepted (and kept
    // alive), a region of pinned host memory is not (raw addresses need `unsafe`).
    let pinned = HostBuffer::<f32>::zeros(&gpu.device, 16)?;
    let e = scale
        .check_args(&[
            KernelArg::from(&pinned.region(..)),
            1.0f32.into(),
            0i32.into(),
        ])
        .unwrap_err();
    ensure!(e.to_string().contains("pinned host buffer"), "{e}");
    let tail = x.region(8..);
    scale.launch(&gpu.stream, cfg, &args![&tail, 2.0f32, 8i32])?;
    drop(tail);
    drop(x); // freed only after the launch has run
    gpu.stream.synchronize()?;
    Ok(())
}

register!(gpu "foundation::bad_launch_shape_rejected" => bad_launch_shape_rejected);
fn bad_launch_shape_rejected(gpu: &Gpu) -> anyhow::Result<()> {
    let inc = gpu.kernel("inc")?;
    let c = DeviceBuffer::<u32>::zeros(&gpu.device, 1)?;
    let e = inc
        .launch(&gpu.stream, LaunchConfig::new(1, 4096), &args![&c])
        .unwrap_err();
    ensure!(matches!(e, Error::LaunchShape { .. }), "{e}");
    let too_much = gpu.device.limits().max_shared_mem_per_block_optin as u32 + 1;
    let e = inc
        .launch(
            &gpu.stream,
            LaunchConfig::new(1, 1).with_shared_mem(too_much),
            &args![&c],
        )
        .unwrap_err();
    ensure!(e.to_string().contains("shared memory"), "{e}");
    // Opting in to more dynamic shared memory makes a 100 KB launch valid.
    let big = 100 * 1024;
    let cfg = LaunchConfig::new(1, 1).with_shared_mem(big);
    ensure!(inc.launch(&gpu.stream, cfg, &args![&c]).is_err());
    inc.set_max_dynamic_shared_mem(big as usize)?;
    inc.launch(&gpu.stream, cfg, &args![&c])?;
    gpu.stream.synchronize()?;
    ensure!(c.to_vec()? == [1]);
    Ok(())
}

register!(gpu "foundation::name_expressions" => name_expressions);
fn name_expressions(gpu: &Gpu) -> anyhow::Result<()> {
    let src = r#"
template <typename T> __global__ void fill(T* p, T v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = v;
}"#;
    let opts = CompileOptions {
        name_expressions: vec!["fill<int>".into(), "fill<double>".into()],
        ..Default::default()
    };
    let m = Module::from_source_with(&gpu.device, src, &opts)?;
    let fi = m.kernel("fill<int>").context("fill<int>")?;
    let fd = m.kernel("fill<double>")?;
    ensure!(fd.params()[1].size == 8 && fi.params()[1].size == 4);
    let p = DeviceBuffer::<f64>::zeros(&gpu.device, 10)?;
    fd.launch(
        &gpu.stream,
        LaunchConfig::new(1, 32),
        &args![&p, 2.5f64, 10i32],
    )?;
    gpu.stream.synchronize()?;
    ensure!(p.to_vec()? == vec![2.5; 10]);
    Ok(())
}

register!(gpu "foundation::events_time_work" => events_time_work);
fn events_time_work(gpu: &Gpu) -> anyhow::Result<()> {
    let spin = gpu.kernel("spin")?;
    let (a, b) = (
        cudagraph::Event::new(&gpu.device)?,
        cudagraph::Event::new(&gpu.device)?,
    );
    let s = Stream::new(&gpu.device)?;
    a.record(&s)?;
    spin.launch(&s, LaunchConfig::new(1, 1), &args![20_000_000i64])?;
    b.record(&s)?;
    b.synchronize()?;
    let ms = a.elapsed_ms(&b)?;
    ensure!(ms > 0.5 && ms < 1000.0, "{ms} ms for ~20M cycles");
    Ok(())
}

register!(gpu "foundation::compiles_are_cached_on_disk" => compile_cache);
/// A second compile of the same program comes from the on-disk cache, gives the same image,
/// and that image loads and runs; another option misses the cache.
fn compile_cache(gpu: &Gpu) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("cudagraph-cache-gpu-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::env::set_var("CUDAGRAPH_CACHE_DIR", &dir);
    let result = (|| -> anyhow::Result<()> {
        let opts = CompileOptions::default();
        let first = cudagraph::compile(Some(&gpu.device), KERNELS, &opts)?;
        ensure!(!first.cached, "a fresh cache directory cannot hold it");
        let second = cudagraph::compile(Some(&gpu.device), KERNELS, &opts)?;
        ensure!(
            second.cached,
            "the second compile did not come from the cache"
        );
        ensure!(second.image == first.image);
        let m = Module::load(&gpu.device, &second.image, second.lowered_names)?;
        let inc = m.kernel("inc")?;
        let c = DeviceBuffer::<u32>::zeros(&gpu.device, 1)?;
        inc.launch(&gpu.stream, LaunchConfig::new(1, 7), &args![&c])?;
        gpu.stream.synchronize()?;
        ensure!(c.to_vec()? == [7]);
        let other = CompileOptions {
            options: vec!["-DCACHE_TEST=1".into()],
            ..Default::default()
        };
        ensure!(!cudagraph::compile(Some(&gpu.device), KERNELS, &other)?.cached);
        Ok(())
    })();
    std::env::remove_var("CUDAGRAPH_CACHE_DIR");
    let _ = std::fs::remove_dir_all(&dir);
    result
}
