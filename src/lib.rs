//! cudagraph (crate docs written below in a later step)
#![warn(missing_docs)]

pub mod dag;
mod device;
pub mod error;
pub mod fft;
mod kernel;
pub mod load;
mod memory;
pub mod result;
mod stream;
pub mod sys;

pub use dag::{
    Backend, Copy2d, CudaBackend, Dag, DagError, Exec, InstantiateFlags, Memset2d, MemsetValue,
    NodeId, NodeKind, RecordingBackend, UpdateOutcome,
};
pub use device::{versions, Device, DeviceLimits, DeviceProperties};
pub use error::{Error, Library, Result, Version};
pub use fft::{
    CallbackParams, CustomCallback, Direction, FftNode, FftParams, FftPlan, FftPlanDesc, FftSpec,
    FftType, Layout, LoadCallback, StoreCallback, StreamFft,
};
pub use kernel::{
    compile, nvrtc_version, CodeKind, CompileOptions, Compiled, Dim3, Kernel, KernelArg,
    LaunchConfig, Module, ParamInfo,
};
pub use memory::{DeviceBuffer, DeviceRepr, HostBuffer, MemorySpace, Region};
pub use stream::{Event, Stream};
