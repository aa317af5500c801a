//! GPU test suite (custom harness, libtest-mimic).
//!
//! Every test here needs a GPU and goes through [`common::gpu_test`]: without a usable GPU it is
//! reported as *ignored* with the reason; with `CUDAGRAPH_REQUIRE_GPU=1` it must run, and fails
//! if it cannot. The `sources::` tests need only NVRTC ([`common::nvrtc_test`]): they compile the
//! suite's CUDA sources on the host.

mod attributes;
mod common;
mod dag;
mod enabled;
mod events;
mod fft;
mod foundation;
mod nccl;
mod placement;
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
    let mut trials = Vec::new();
    trials.extend(foundation::tests());
    trials.extend(dag::tests());
    trials.extend(enabled::tests());
    trials.extend(events::tests());
    trials.extend(attributes::tests());
    trials.extend(fft::tests());
    trials.extend(soundness::tests());
    trials.extend(nccl::tests());
    trials.extend(placement::tests());
    trials.extend(sources::tests());
    libtest_mimic::run(&args, trials).exit();
}
