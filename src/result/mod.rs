//! The thin layer: one `unsafe fn` per library call, returning [`Result`](crate::Result).
//!
//! These functions do no validation beyond what the call itself does; they convert status codes
//! into [`Error`](crate::Error)s and out-parameters into return values. Their callers (the safe
//! types of this crate) uphold each function's `# Safety` contract.

pub mod cublas;
#[cfg(feature = "cudarc")]
pub mod cudarc;
pub mod cufft;
pub mod driver;
pub mod nccl;
pub mod nvrtc;
pub mod runtime;
