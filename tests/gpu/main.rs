//! GPU test suite (custom harness, libtest-mimic).
//!
//! Every test here needs a GPU and goes through [`common::gpu_test`]: without a usable GPU it is
//! reported as *ignored* with the reason; with `CUDAGRAPH_REQUIRE_GPU=1` it must run, and fails
//! if it cannot.

mod common;
mod dag;
mod fft;
mod foundation;
mod nccl;
mod placement;
mod soundness;

fn main() {
    // SAFETY: first thing in main: no other thread exists yet (nothing has touched CUDA).
    unsafe { cudagraph::load::set_nccl_nvls_off() };
    let args = libtest_mimic::Arguments::from_args();
    let mut trials = Vec::new();
    trials.extend(foundation::tests());
    trials.extend(dag::tests());
    trials.extend(fft::tests());
    trials.extend(soundness::tests());
    trials.extend(nccl::tests());
    trials.extend(placement::tests());
    libtest_mimic::run(&args, trials).exit();
}
