//! GPU test suite (custom harness, libtest-mimic).
//!
//! Each test is registered next to its code (`register!(gpu "module::name" => function);`,
//! see [`common::register`]) and collected here. Every test here needs a GPU and goes through
//! [`common::gpu_test`]: without a usable GPU it is
//! reported as *ignored* with the reason; with `CUDAGRAPH_REQUIRE_GPU=1` it must run, and fails
//! if it cannot. The `sources::` tests need only NVRTC ([`common::nvrtc_test`]): they compile the
//! suite's CUDA sources on the host.

#[macro_use]
mod common;
mod attributes;
mod conditional;
#[cfg(feature = "cudarc")]
mod cudarc;
mod dag;
mod device_side;
mod drop_order;
mod enabled;
mod events;
mod fft;
mod fft_forms;
mod fft_update;
mod foundation;
mod gemm;
mod infer;
mod memory_nodes;
mod nccl;
mod placement;
mod profile;
mod programmatic;
mod soundness;
mod sources;

fn main() {
    // SAFETY: first thing in main: no other thread exists yet (nothing has touched CUDA).
    unsafe { cudagraph::load::set_nccl_nvls_off() };
    let mut args = libtest_mimic::Arguments::from_args();
    // One test at a time unless asked otherwise: some tests time queued work against a host
    // read, or count the cuFFT plans an update makes, and another test's GPU work running
    // alongside disturbs both (they then fail spuriously).
    if args.test_threads.is_none() && std::env::var_os("RUST_TEST_THREADS").is_none() {
        args.test_threads = Some(1);
    }
    // The registered tests, module by module in this order, by name within a module (the
    // link order of the registrations is not the source order).
    const ORDER: [&str; 20] = [
        "foundation::",
        "dag::",
        "enabled::",
        "events::",
        "attributes::",
        "conditional::",
        "memory_nodes::",
        "device_side::",
        "gemm::",
        "programmatic::",
        "infer::",
        "fft::",
        "fft_update::",
        "soundness::",
        "drop_order::",
        "cudarc::",
        "nccl::",
        "placement::",
        "profile::",
        "sources::",
    ];
    let rank = |name: &str| ORDER.iter().position(|m| name.starts_with(m));
    let mut tests: Vec<&common::Registered> = common::TESTS.iter().collect();
    if let Some(t) = tests.iter().find(|t| rank(t.name).is_none()) {
        panic!(
            "test {} is of no module in ORDER (tests/gpu/main.rs)",
            t.name
        );
    }
    tests.sort_by_key(|t| (rank(t.name), t.name));
    let trials = tests.iter().map(|t| (t.make)()).collect();
    libtest_mimic::run(&args, trials).exit();
}
