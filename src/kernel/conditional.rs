//! Conditional handles as kernel arguments: [`Conditional`], and what CUDA C++ that sets one
//! needs from NVRTC ([`CONDITIONAL_INCLUDE`]).
//!
//! A conditional node (IF, IF/ELSE, WHILE, SWITCH: `Dag::add_if` and the others) reads a
//! condition value that device code sets with `cudaGraphSetConditional(handle, value)`. The
//! handle (CUDA's `cudaGraphConditionalHandle`, a 64-bit value) exists only once the graph is
//! built, so the crate hands out a [`Conditional`] when the DAG declares one
//! (`Dag::conditional_handle`), and kernel nodes take it as an argument
//! (`KernelArg::from(&cond)`, or in [`args!`](crate::args)): lowering writes the graph's handle
//! in its place.

/// The include line CUDA C++ source needs to call `cudaGraphSetConditional` and to name the
/// `cudaGraphConditionalHandle` parameter type. Put it at the top of the source given to
/// [`compile`](fn@crate::compile); nothing else is needed (no `-rdc`, no device-runtime library):
/// [`compile`](fn@crate::compile) adds the CUDA toolkit's include directory, where the header is,
/// when it finds one (`$CUDA_PATH/include`, `$CUDA_HOME/include`, `/usr/local/cuda/include`:
/// [`toolkit_include_dir`]).
///
/// ```
/// let source = format!(
///     "{}extern \"C\" __global__ void stop_when_done(cudaGraphConditionalHandle h, \
///      const int* done) {{ if (*done) cudaGraphSetConditional(h, 0); }}",
///     cudagraph::CONDITIONAL_INCLUDE
/// );
/// assert!(source.starts_with("#include <cuda_device_runtime_api.h>"));
/// ```
pub const CONDITIONAL_INCLUDE: &str = "#include <cuda_device_runtime_api.h>\n";

/// The CUDA toolkit's include directory that [`compile`](fn@crate::compile) adds to the include
/// path, if one is installed: the header of [`CONDITIONAL_INCLUDE`] is found there (`None`:
/// source that includes it does not compile; set `CUDA_PATH`).
pub fn toolkit_include_dir() -> Option<std::path::PathBuf> {
    super::compile::toolkit_include()
}

/// A conditional handle declared on a [`Dag`](crate::Dag) (`Dag::conditional_handle`): the
/// condition of one conditional node of that DAG, reset to its default value at the start of
/// every launch of the graph (`cudaGraphCondAssignDefault`), and set by device code with
/// `cudaGraphSetConditional`.
///
/// Pass it to the kernel that sets it as an argument of type `cudaGraphConditionalHandle`
/// (`KernelArg::from(&cond)`); such a kernel node must be in the DAG that declared the handle
/// or in a conditional body inside it (validation checks this, naming the kernel node). The
/// value a kernel receives is the handle of the graph being built; a handle cannot be passed
/// to a stream launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Conditional {
    /// The DAG that declared it (its handle scope, unique in the process).
    pub(crate) scope: u64,
    /// Its number among the DAG's handles (declaration order).
    pub(crate) index: u32,
    /// The value it has at the start of every launch.
    pub(crate) default: u32,
}

impl Conditional {
    /// The value the condition has at the start of every launch.
    pub fn default_value(&self) -> u32 {
        self.default
    }

    /// Its number among its DAG's handles, in declaration order (DOT and recordings show it as
    /// `handle #n`).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The bytes a kernel node keeps for the argument until lowering writes the graph's
    /// handle instead (the Exec's copy of the DAG then holds the real handle).
    pub(crate) fn placeholder(&self) -> u64 {
        u64::from(self.index)
    }
}
