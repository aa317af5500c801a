//! The crate's error type.
//!
//! Every fallible call returns [`Result<T>`](Result). Errors are typed so callers can match on
//! them, and their `Display` text names what failed and, where there is one, the DAG node
//! concerned. They convert into `anyhow::Error` through `std::error::Error`.

use std::fmt;

/// Shorthand for `std::result::Result<T, cudagraph::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A CUDA-related library the crate loads at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Library {
    /// The CUDA runtime, `libcudart.so.13`.
    Cudart,
    /// The CUDA driver, `libcuda.so.1` (installed with the NVIDIA driver; the runtime needs it
    /// too). The crate makes a few calls through it directly: see `result::driver`.
    Driver,
    /// cuFFT, `libcufft.so.12`.
    Cufft,
    /// NVRTC, the run-time compiler, `libnvrtc.so.13`.
    Nvrtc,
    /// nvJitLink, which cuFFT needs for LTO callbacks, `libnvJitLink.so.13`.
    NvJitLink,
    /// NCCL, the collective communication library, `libnccl.so.2` (CUDA 13 build, 2.28 or
    /// newer).
    Nccl,
    /// cuBLAS, `libcublas.so.13` (GEMM nodes).
    Cublas,
    /// cuBLASLt, `libcublasLt.so.13`, which cuBLAS loads (opened first, so that its absence is
    /// named).
    CublasLt,
}

impl Library {
    /// The file name the library is looked up by.
    pub fn soname(self) -> &'static str {
        match self {
            Library::Cudart => "libcudart.so.13",
            Library::Driver => "libcuda.so.1",
            Library::Cufft => "libcufft.so.12",
            Library::Nvrtc => "libnvrtc.so.13",
            Library::NvJitLink => "libnvJitLink.so.13",
            Library::Nccl => "libnccl.so.2",
            Library::Cublas => "libcublas.so.13",
            Library::CublasLt => "libcublasLt.so.13",
        }
    }

    /// How to make the library loadable, for [`Error::LibraryNotFound`].
    pub fn install_hint(self) -> &'static str {
        match self {
            Library::Driver => {
                "Install the NVIDIA driver (it provides libcuda.so.1) and check that the \
                 dynamic loader finds it (ldconfig -p | grep libcuda)"
            }
            Library::Nccl => {
                "Install NCCL for CUDA 13 (e.g. `pip install nvidia-nccl-cu13`, or the libnccl2 \
                 package), or set CUDAGRAPH_NCCL_PATH to libnccl.so.2 or its directory, or put \
                 its directory on LD_LIBRARY_PATH"
            }
            Library::Cublas | Library::CublasLt => {
                "Install cuBLAS for CUDA 13 (the toolkit's lib64, or `pip install \
                 nvidia-cublas` and its nvidia/cu13/lib on LD_LIBRARY_PATH), or set CUDA_PATH"
            }
            _ => {
                "Install the CUDA 13 toolkit libraries and put their directory on \
                 LD_LIBRARY_PATH, or set CUDA_PATH"
            }
        }
    }
}

impl fmt::Display for Library {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Library::Cudart => "the CUDA runtime",
            Library::Driver => "the CUDA driver",
            Library::Cufft => "cuFFT",
            Library::Nvrtc => "NVRTC",
            Library::NvJitLink => "nvJitLink (needed for cuFFT LTO callbacks)",
            Library::Nccl => "NCCL",
            Library::Cublas => "cuBLAS",
            Library::CublasLt => "cuBLASLt (needed by cuBLAS)",
        })
    }
}

/// A `major.minor` CUDA version, as the libraries report it (`13000` is 13.0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
}

impl Version {
    /// Decodes CUDA's `1000 * major + 10 * minor` encoding.
    pub fn from_cuda(encoded: i32) -> Self {
        let v = encoded.max(0) as u32;
        Version {
            major: v / 1000,
            minor: (v % 1000) / 10,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Everything that can go wrong in cudagraph.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A library could not be loaded from any of the places tried.
    #[error(
        "{library} ({soname}) could not be loaded; tried {tried:?}; last error: {reason}. {}",
        library.install_hint()
    )]
    LibraryNotFound {
        /// Which library.
        library: Library,
        /// Its file name.
        soname: &'static str,
        /// The paths and names tried, in order.
        tried: Vec<String>,
        /// The loader's message for the last attempt.
        reason: String,
    },
    /// The library was loaded but lacks a function the call needs (it is older than needed).
    #[error(
        "{library} has no function `{symbol}`: the installed library is too old for this call"
    )]
    MissingSymbol {
        /// Which library.
        library: Library,
        /// The missing function.
        symbol: &'static str,
    },
    /// A library or the driver is older than the crate needs.
    #[error("{what} is version {found}, but cudagraph needs {required} or newer: {hint}")]
    TooOld {
        /// What is too old ("the CUDA runtime", "the NVIDIA driver", ...).
        what: &'static str,
        /// The version found.
        found: Version,
        /// The version needed.
        required: Version,
        /// How to fix it.
        hint: &'static str,
    },
    /// No usable CUDA device (no driver, no GPU, or the ordinal does not exist).
    #[error("no usable CUDA device: {0}")]
    NoDevice(String),
    /// A CUDA runtime or driver call failed.
    #[error("{call} failed: {name} ({code}): {message}")]
    Cuda {
        /// The function that failed: a runtime function (`cuda…`) or a driver one (`cu…`).
        call: &'static str,
        /// The numeric `cudaError_t`, or for a driver function its `CUresult`.
        code: i32,
        /// The error's name, e.g. `cudaErrorInvalidValue` (`CUDA_ERROR_INVALID_VALUE` from the
        /// driver).
        name: String,
        /// CUDA's description of the error.
        message: String,
    },
    /// A cuFFT call failed.
    #[error("{call} failed: {name} ({code})")]
    Cufft {
        /// The cuFFT function that failed.
        call: &'static str,
        /// The numeric `cufftResult`.
        code: i32,
        /// The status name, e.g. `CUFFT_INVALID_PLAN`.
        name: &'static str,
    },
    /// A cuBLAS call failed.
    #[error("{call} failed: {name} ({code})")]
    Cublas {
        /// The cuBLAS function that failed.
        call: &'static str,
        /// The numeric `cublasStatus_t`.
        code: i32,
        /// The status name, e.g. `CUBLAS_STATUS_INVALID_VALUE`.
        name: &'static str,
    },
    /// An NVRTC call failed (other than a compile error, see [`Error::Compile`]).
    #[error("{call} failed: {name} ({code})")]
    Nvrtc {
        /// The NVRTC function that failed.
        call: &'static str,
        /// The numeric `nvrtcResult`.
        code: i32,
        /// NVRTC's name for it.
        name: String,
    },
    /// NVRTC rejected a program; the log says why.
    #[error("NVRTC could not compile `{program}`:\n{log}")]
    Compile {
        /// The program's name.
        program: String,
        /// The compiler's log.
        log: String,
    },
    /// A module has no kernel of this name.
    #[error("no kernel named `{name}` in the module ({reason})")]
    KernelNotFound {
        /// The kernel name asked for.
        name: String,
        /// What CUDA said.
        reason: String,
    },
    /// A cubin's description of a kernel's parameters (its `.nv.info` section) and CUDA's
    /// (`cudaFuncGetParamInfo`) differ: the module's layout cannot be trusted.
    #[error(
        "kernel `{kernel}`: parameter {index} is (offset, size) {cubin:?} in the image but \
         {cuda:?} for CUDA (None: no such parameter)"
    )]
    ParamLayoutMismatch {
        /// The kernel name asked for.
        kernel: String,
        /// The parameter's position.
        index: usize,
        /// Its offset and size as the image describes them: the cubin's `.nv.info` section,
        /// or the PTX's `.entry` declaration.
        cubin: (usize, usize),
        /// Its offset and size from `cudaFuncGetParamInfo`; `None` where CUDA has no such
        /// parameter.
        cuda: Option<(usize, usize)>,
    },
    /// Kernel arguments do not match the kernel's parameters (of a node, or of a stream
    /// launch).
    #[error("{}kernel `{kernel}` {problem}", at_node(node))]
    KernelArgs {
        /// The node, for a kernel node; `None` for a stream launch.
        node: Option<String>,
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
    /// A launch shape the device (or the kernel) cannot run.
    #[error("{}kernel `{kernel}` launch {problem}", at_node(node))]
    LaunchShape {
        /// The node, for a kernel node; `None` for a stream launch.
        node: Option<String>,
        /// The kernel's name.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
    /// A copy or memset outside a buffer, or between buffers of different sizes.
    #[error("{}{problem}", at_node(node))]
    OutOfBounds {
        /// The node, for a copy or memset node; `None` for a buffer operation.
        node: Option<String>,
        /// What is wrong.
        problem: String,
    },
    /// An object of one device was used with another, or with a recording backend.
    #[error("{}{problem}", at_node(node))]
    WrongDevice {
        /// The node, when a node uses the object; `None` otherwise.
        node: Option<String>,
        /// What is wrong.
        problem: String,
    },
    /// The DAG is invalid; the error names the node.
    #[error("{0}")]
    Dag(#[from] DagError),
    /// A host node's closure panicked while a graph ran.
    #[error("host node `{node}` panicked: {message}")]
    HostNodePanicked {
        /// The host node's name.
        node: String,
        /// The panic message.
        message: String,
    },
    /// An in-place update of an executable graph was refused (by the crate's check that the
    /// nodes match, or by `cudaGraphExecUpdate`).
    #[error("the graph update was refused{}: {reason}", node.as_ref().map(|n| format!(" at node `{n}`")).unwrap_or_default())]
    UpdateRefused {
        /// The node CUDA blamed, if it named one.
        node: Option<String>,
        /// CUDA's reason (`cudaGraphExecUpdateResult`).
        reason: String,
    },
    /// An error that happened while an object was dropped, reported by a later call.
    #[error("while releasing {what}: {source}")]
    Deferred {
        /// What was being released.
        what: &'static str,
        /// The error.
        source: Box<Error>,
    },
    /// An NCCL call failed.
    #[error("{call} failed: {name} ({code}): {message}")]
    Nccl {
        /// The NCCL function that failed.
        call: &'static str,
        /// The numeric `ncclResult_t`.
        code: i32,
        /// NCCL's name for the status, e.g. `ncclInvalidArgument`.
        name: &'static str,
        /// `ncclGetErrorString` and, where NCCL kept one, `ncclGetLastError`'s text.
        message: String,
    },
    /// A rank index that is not one of the communicators' ranks
    /// ([`Communicators::comm`](crate::Communicators::comm)).
    #[error("rank {rank} does not exist ({ranks} ranks)")]
    NoSuchRank {
        /// The rank asked for.
        rank: usize,
        /// How many ranks there are.
        ranks: usize,
    },
    /// Per-rank arguments that do not fit the communicators: not one stream, buffer, peer or
    /// DAG per rank, or devices that cannot make communicators (none, or one given twice).
    #[error("{call}: {problem}")]
    RankMismatch {
        /// The call (`Communicators::new`, `all_reduce`, `check_ranks`, …).
        call: &'static str,
        /// What does not fit.
        problem: String,
    },
    /// A collective called on streams ([`Communicators::all_reduce`](crate::Communicators::all_reduce)
    /// and the others) was refused: a rank's buffers, root or peers do not fit the call, or the
    /// ranks' calls do not match each other. (A collective *node* reports the same problems as
    /// [`DagError::Collective`], naming the node.)
    #[error("{call}: {problem}")]
    CollectiveCall {
        /// The call and the rank concerned, e.g. `all_reduce (rank 1)`.
        call: String,
        /// What is wrong.
        problem: String,
    },
    /// An FFT plan that cannot be made or run as described, whichever node or call uses it:
    /// [`FftPlan::new`](crate::FftPlan::new)'s checks (rank, sizes, batch, layout, callbacks
    /// that do not fit the type or precision, `Fusion::Unfused` without a load callback, sizes
    /// that overflow); a plan with callbacks whose sizes, strides or batch do not fit in 32 bits
    /// (cuFFT's LTO callbacks need them to, found when the cuFFT plan is made); an unfused form
    /// asked of a plan without one ([`measure_fusion`](crate::fft::measure_fusion) of a plan
    /// without a load callback); a transform whose stream capture added nothing to the graph.
    /// All but the last are fixed in the [`FftPlanDesc`](crate::fft::FftPlanDesc). (An FFT
    /// node's buffers and callback parameters that do not fit its plan are [`DagError::Fft`],
    /// naming the node.)
    #[error("FFT plan: {problem}")]
    FftPlan {
        /// What is wrong.
        problem: String,
    },
    /// A collective node was lowered to CUDA other than by
    /// [`Communicators::instantiate`](crate::Communicators::instantiate), which captures every
    /// rank's DAG at once (a capture on its own could wait forever for the other ranks).
    #[error(
        "a collective node ({collective}) can only be lowered to CUDA by \
         Communicators::instantiate, which captures every rank's DAG at once \
         (Dag::instantiate, Dag::lower on a CudaBackend and Exec::update cannot)"
    )]
    CollectiveOutsideInstantiate {
        /// The node's collective and rank, e.g. `all-reduce sum f32 x1024, rank 1 of 2`.
        collective: String,
    },
    /// A string handed to CUDA (kernel source, program, option, name, path) contains a NUL
    /// byte, which C strings cannot hold.
    #[error("{what} contains a NUL byte")]
    Nul {
        /// What the string is.
        what: &'static str,
    },
    /// Called from a host node (CUDA's callback thread), where CUDA calls are forbidden and
    /// waiting for the GPU would deadlock.
    #[error("{what} was called from a host node: {reason}")]
    InHostNode {
        /// The call.
        what: String,
        /// Why it cannot run there, and what to do instead.
        reason: &'static str,
    },
    /// Called inside the closure of a synchronous helper (`HostBuffer::read_with` /
    /// `write_with`), which holds the use lists of the memory it touches and the launch gates
    /// of the graphs using it: another helper or stream operation there could wait for the
    /// helper itself.
    #[error(
        "{what} was called inside the closure of a synchronous helper (HostBuffer::read_with or \
         write_with), where it could wait for that helper; do it after the closure returns"
    )]
    InsideHelper {
        /// The call.
        what: String,
    },
    /// GPU work that uses this memory was queued, but neither its completion marker could be
    /// recorded nor its stream waited for (the context is most likely broken): it may still
    /// run as far as anyone can tell, so the memory is never freed and the host may no longer
    /// read or write it, nor may a synchronous helper use it.
    #[error(
        "GPU work queued on this memory could not be tracked (recording its completion marker \
         and waiting for its stream both failed): the memory is kept, and no longer accessed \
         from the host"
    )]
    UntrackedWork,
    /// A recording backend's placeholder (kernel, event, communicators) was used where real
    /// CUDA objects are needed.
    #[error("{what} is a recording backend's placeholder: {problem}")]
    Placeholder {
        /// The object.
        what: String,
        /// What it cannot do.
        problem: &'static str,
    },
    /// An environment variable the crate reads is unset where it must be set, or has a value
    /// it does not accept.
    #[error("{variable}{}: expected {expected}", env_value(value))]
    BadEnv {
        /// The variable.
        variable: &'static str,
        /// Its value (`None`: unset).
        value: Option<String>,
        /// What it may be, and how to set it.
        expected: &'static str,
    },
    /// Options given to a call do not fit together (e.g. an upload requested without an
    /// upload stream, a compile without a device or an architecture); the call did nothing.
    #[error("{what}: {problem}")]
    BadOptions {
        /// The call or options type.
        what: &'static str,
        /// What is wrong, and what to give instead.
        problem: String,
    },
    /// A file the crate reads or writes itself (not one of the user's) could not be.
    #[error("{what}: {kind}: {message}")]
    Io {
        /// What the crate was doing.
        what: &'static str,
        /// The kind of I/O error.
        kind: std::io::ErrorKind,
        /// The operating system's message.
        message: String,
    },
    /// Graphviz's `dot`, which renders DOT text to SVG
    /// ([`Profile::write_svg`](crate::Profile::write_svg)), was not found on the `PATH`.
    #[error(
        "Graphviz `{program}` was not found on the PATH: install Graphviz (Debian: apt install \
         graphviz) to render SVG, or render the DOT text elsewhere"
    )]
    GraphvizNotFound {
        /// The program looked for.
        program: String,
    },
    /// Graphviz's `dot` ran and failed (it rejected the DOT text, or could not write the file).
    #[error("Graphviz `dot` failed ({status}): {stderr}")]
    Graphviz {
        /// How it exited.
        status: String,
        /// What it printed on standard error.
        stderr: String,
    },
    /// A cudarc object that cudagraph cannot share (feature `cudarc`): a context other than
    /// its device's primary context, a stream handle that is not one stream (the per-thread
    /// and legacy-default names), or a cudarc buffer that is not (or no longer) one the crate
    /// can hand back.
    #[cfg(feature = "cudarc")]
    #[error("{what}: {problem}")]
    Cudarc {
        /// The call.
        what: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// A cudarc call the crate made failed (feature `cudarc`).
    #[cfg(feature = "cudarc")]
    #[error("{call} failed (cudarc): {message}")]
    CudarcCall {
        /// The cudarc call.
        call: &'static str,
        /// cudarc's `DriverError` in words.
        message: String,
    },
    /// Any other invalid use, described in words.
    #[error("{0}")]
    Invalid(String),
}

/// Why a DAG is invalid. Every variant names the node concerned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DagError {
    /// An edge would close a cycle; the nodes are listed in cycle order, the first repeated at
    /// the end.
    #[error("dependency would create a cycle: {}", .nodes.join(" -> "))]
    Cycle {
        /// The nodes of the cycle.
        nodes: Vec<String>,
    },
    /// A node id that is not (or no longer) in this DAG; the number is its serial.
    #[error("node #{0} is not in this DAG (removed, or from another DAG)")]
    UnknownNode(u64),
    /// A node placed on a device where it cannot run: its kind is not placeable (FFT,
    /// captured, collective and child-graph nodes run on the device the DAG is lowered for),
    /// the device is not one of the backend's, or the node is in a child graph.
    #[error("node `{node}`: {problem}")]
    Placement {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A node used in a way its kind does not allow.
    #[error("node `{node}`: {problem}")]
    WrongKind {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A collective node's communicator, buffers, lengths or peers do not fit together (or do
    /// not match the other ranks' nodes).
    #[error("node `{node}`: {problem}")]
    Collective {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// An FFT node's plan, buffers or callbacks do not fit together.
    #[error("node `{node}`: {problem}")]
    Fft {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A GEMM node's ([`Dag::add_gemm`](crate::Dag::add_gemm)) sizes, leading dimensions,
    /// buffers or cuBLAS handle do not fit together.
    #[error("node `{node}`: {problem}")]
    Gemm {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A graph memory node ([`Dag::add_alloc`](crate::Dag::add_alloc),
    /// [`Dag::add_free`](crate::Dag::add_free)) or a node using a graph-allocated buffer breaks
    /// a rule of graph allocations: a use outside the span between the allocation and its free,
    /// a free without an allocation, a second free, a buffer of another DAG, a memory node
    /// where CUDA allows none (child graphs, conditional bodies), an allocation never freed
    /// without `auto_free_on_launch`, or an update CUDA cannot make to such a graph.
    #[error("node `{node}`: {problem}")]
    GraphMemory {
        /// The node.
        node: String,
        /// What is wrong.
        problem: String,
    },
    /// A programmatic edge ([`Dag::add_programmatic_dependency`](crate::Dag::add_programmatic_dependency))
    /// where CUDA allows none: not between two kernel nodes, between kernels on two devices,
    /// on a device older than compute capability 9.0, or where the two nodes are already joined
    /// by an edge of another kind.
    #[error("programmatic edge `{before}` -> `{after}`: {problem}")]
    Programmatic {
        /// The node before the edge.
        before: String,
        /// The node after it.
        after: String,
        /// What is wrong.
        problem: String,
    },
    /// CUDA refused to instantiate the graph and blamed this node
    /// (`cudaGraphInstantiateWithParams`' error node; a node a captured or FFT node made is
    /// named by that node).
    #[error("node `{node}`: CUDA cannot instantiate the graph: {problem}")]
    Instantiate {
        /// The node.
        node: String,
        /// CUDA's instantiation result in words, and its error.
        problem: String,
    },
}

/// `="VALUE"` for a set variable, ` is unset` otherwise.
fn env_value(value: &Option<String>) -> String {
    match value {
        Some(v) => format!("={v:?}"),
        None => " is unset".into(),
    }
}

impl Error {
    /// An [`Error::Io`] for `e` while doing `what`.
    pub(crate) fn io(what: &'static str, e: &std::io::Error) -> Error {
        Error::Io {
            what,
            kind: e.kind(),
            message: e.to_string(),
        }
    }
}

/// `node `NAME`: ` for an error of a node, nothing otherwise.
fn at_node(node: &Option<String>) -> String {
    match node {
        Some(n) => format!("node `{n}`: "),
        None => String::new(),
    }
}
