//! cudagraph (work in progress)
pub mod sys;
