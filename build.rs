//! Build script.
//!
//! Without the `bindgen` feature this does nothing: the committed `src/sys/bindings.rs` is used and
//! neither libclang nor the CUDA headers are needed.
//!
//! With `--features bindgen` it runs bindgen over `wrapper.h` against the CUDA headers found under
//! `$CUDA_PATH/include`, `$CUDA_HOME/include` or `/usr/local/cuda/include` and writes
//! `$OUT_DIR/bindings.rs`, which `src/sys/mod.rs` then includes instead of the committed file.
//! `scripts/regen-bindings` uses this to refresh `src/sys/bindings.rs`.
//!
//! The generated file has this shape:
//! - at top level, every type and constant the runtime, driver, cuFFT, NVRTC, NCCL and cuBLAS
//!   functions need (no functions);
//! - `pub mod cudart`, `pub mod cuda` (the driver: the few calls the crate makes through it),
//!   `pub mod cufft`, `pub mod nvrtc`, `pub mod nccl` and `pub mod cublas` (the GEMM node's few
//!   calls), each holding one struct (`Cudart`, `Cuda`, `Cufft`, `Nvrtc`, `Nccl`, `Cublas`) whose
//!   fields are the library's functions, loaded at run time with libloading. Each module starts
//!   with `use super::*;` to reuse the top-level types.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "bindgen")]
    generate::run();
}

#[cfg(feature = "bindgen")]
mod generate {
    use std::env;
    use std::fmt::Write as _;
    use std::path::{Path, PathBuf};

    /// Status types the libraries return: newtypes, so that a value unknown to these headers
    /// (from a newer library) is still a valid Rust value. NCCL's reduction operators are
    /// newtypes too (`ncclRedOpCreatePreMulSum` returns values past the named ones), and so are
    /// its data types (several names share a value).
    const NEWTYPE_ENUMS: &str = "cudaError|cudaError_enum|cufftResult_t|nvrtcResult|ncclResult_t|\
         ncclRedOp_t|ncclDataType_t|cublasStatus_t";

    /// Enums whose values are OR-ed together (or that are bit masks in some struct field): plain
    /// `pub const NAME: EnumType = value;` items with `pub type EnumType = c_uint;`.
    /// The functions and struct fields that take them are mostly plain integers anyway
    /// (`cudaGraphInstantiateWithFlags(.., flags: c_ulonglong)`).
    const CONSTIFIED_ENUMS: &str = "cudaGraphInstantiateFlags|cudaGraphDebugDotFlags|\
         cudaGraphicsRegisterFlags|cudaGraphicsMapFlags|cudaFlushGPUDirectRDMAWritesOptions|\
         cudaMemAllocationHandleType|cudaMemcpyFlags|cudaGraphConditionalHandleFlags|\
         cudaUserObjectFlags|cudaUserObjectRetainFlags";

    /// Structs whose all-zero value is not a valid Rust value (a Rust-enum field with no 0
    /// variant): no `Default`, which bindgen would otherwise implement by zeroing.
    const NO_DEFAULT: &str = "cudaMemcpy3DOperand|cudaMemcpy3DBatchOp|\
         cudaExternalMemoryHandleDesc|cudaExternalSemaphoreHandleDesc|cudaAsyncNotificationInfo";

    /// Types wanted even where no function names them directly. The first entry takes every type
    /// of the three libraries (flag enums such as `cudaGraphInstantiateFlags` are named by no
    /// function: those take plain integers); the others are the ones cudagraph relies on, kept
    /// here so that narrowing the first cannot drop them.
    const EXTRA_TYPES: &[&str] = &[
        "cuda.*|cufft.*|nvrtc.*|nccl.*",
        "cudaKernelNodeParams",
        "cudaMemcpy3DParms",
        "cudaMemsetParams",
        "cudaHostNodeParams",
        "cudaGraphNodeParams",
        "cudaConditionalNodeParams",
        "cudaGraphExecUpdateResultInfo",
        "cudaGraphInstantiateParams",
        "cudaDeviceProp",
        "cudaFuncAttributes",
        "cufftXtCallbackType",
        "cudaLaunchAttribute.*",
    ];

    /// `#define` constants wanted.
    const VARS: &[&str] = &[
        "CUDART_VERSION",
        "CUFFT_VER.*",
        "CUFFT_FORWARD",
        "CUFFT_INVERSE",
        "cudaHostAlloc.*",
        "cudaStream.*",
        "cudaEvent.*",
        "cudaGraphInstantiateFlag.*",
        "NCCL_MAJOR",
        "NCCL_MINOR",
        "NCCL_PATCH",
        "NCCL_VERSION_CODE",
        "NCCL_UNIQUE_ID_BYTES",
        "NCCL_CONFIG_UNDEF_INT",
    ];

    /// (module, struct, function regex)
    const LIBRARIES: &[(&str, &str, &str)] = &[
        ("cudart", "Cudart", "cuda.*"),
        // The driver (libcuda.so.1): only the calls the crate makes through it, not the whole
        // API. `cuda.h` maps each name to its current version with a `#define`
        // (`cuGraphExecKernelNodeSetParams` is `cuGraphExecKernelNodeSetParams_v2`): those are
        // the symbols to load.
        (
            "cuda",
            "Cuda",
            "cuInit|cuGetErrorName|cuGetErrorString|cuDeviceGet|cuDevicePrimaryCtxRetain|\
             cuDevicePrimaryCtxRelease_v2|cuGraphExecKernelNodeSetParams_v2|cuLinkCreate_v2|\
             cuLinkAddData_v2|cuLinkAddFile_v2|cuLinkComplete|cuLinkDestroy|cuGraphLaunch",
        ),
        ("cufft", "Cufft", "cufft.*"),
        ("nvrtc", "Nvrtc", "nvrtc.*"),
        ("nccl", "Nccl", "nccl.*"),
        // cuBLAS (libcublas.so.13): only the calls a GEMM node makes, not its hundreds of
        // routines. `cublas_v2.h` maps each name to its `_v2` symbol with a `#define`.
        (
            "cublas",
            "Cublas",
            "cublasCreate_v2|cublasDestroy_v2|cublasGetVersion_v2|cublasGetStatusName|\
             cublasGetStatusString|cublasSetStream_v2|cublasSetWorkspace_v2|\
             cublasSetPointerMode_v2|cublasGemmEx",
        ),
    ];

    fn cuda_include_dir() -> PathBuf {
        let mut tried = Vec::new();
        let candidates = ["CUDA_PATH", "CUDA_HOME"]
            .iter()
            .filter_map(|var| {
                env::var_os(var)
                    .filter(|v| !v.is_empty())
                    .map(|v| (format!("${var}"), PathBuf::from(v)))
            })
            .chain(std::iter::once((
                "default".to_string(),
                PathBuf::from("/usr/local/cuda"),
            )));
        for (origin, root) in candidates {
            let include = root.join("include");
            if include.join("cuda_runtime_api.h").is_file() {
                return include;
            }
            tried.push(format!("{} ({origin})", include.display()));
        }
        panic!(
            "feature `bindgen`: no CUDA headers (cuda_runtime_api.h) found; tried {}. Set \
             CUDA_PATH to a CUDA toolkit root whose include/ holds cuda_runtime_api.h, cufft.h, \
             cufftXt.h, nvrtc.h and nccl.h (scripts/regen-bindings assembles one from the pinned \
             NVIDIA wheels), or build without the feature to use the committed src/sys/bindings.rs.",
            tried.join(", ")
        );
    }

    fn base_builder(wrapper: &Path, include: &Path) -> bindgen::Builder {
        bindgen::Builder::default()
            .header(wrapper.to_str().expect("wrapper.h path is not UTF-8"))
            .clang_arg(format!("-I{}", include.display()))
            // Stay within the crate's MSRV and edition.
            .rust_target(bindgen::RustTarget::stable(85, 0).expect("rust target"))
            .rust_edition(bindgen::RustEdition::Edition2021)
            // Keep the output independent of the clang version's comment parsing and small.
            .generate_comments(false)
            .layout_tests(true)
            .derive_debug(true)
            .derive_copy(true)
            .derive_default(true)
            .no_default(NO_DEFAULT)
            .prepend_enum_name(false)
            .newtype_enum(NEWTYPE_ENUMS)
            .constified_enum(CONSTIFIED_ENUMS)
            // Every other enum (all are of these libraries: see the allowlists) is a Rust enum.
            // A default style rather than `rustified_enum(..)`: bindgen ranks a rustified match
            // above a constified one, and its regexes cannot say "all but these".
            .default_enum_style(bindgen::EnumVariation::Rust {
                non_exhaustive: false,
            })
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
    }

    /// Removes the top-level `extern "C" { ... }` blocks (the function declarations) from bindgen
    /// output; each block opens with an unindented `unsafe extern "C" {` line and closes at the
    /// next unindented `}` line.
    fn strip_extern_blocks(generated: &str) -> String {
        let mut kept = String::with_capacity(generated.len());
        let mut in_block = false;
        for line in generated.lines() {
            if in_block {
                in_block = line != "}";
            } else if line == "unsafe extern \"C\" {" || line == "extern \"C\" {" {
                in_block = true;
            } else {
                kept.push_str(line);
                kept.push('\n');
            }
        }
        assert!(!in_block, "unterminated extern block in bindgen output");
        assert!(
            !kept.contains("extern \"C\" {"),
            "bindgen output has an extern block in an unexpected form"
        );
        kept
    }

    pub fn run() {
        for var in ["CUDA_PATH", "CUDA_HOME"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
        let wrapper = manifest_dir.join("wrapper.h");
        println!("cargo:rerun-if-changed=wrapper.h");
        let include = cuda_include_dir();
        let out = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("bindings.rs");

        // 1. Types and constants, no functions. bindgen only follows the allowlisted functions to
        //    the types they use when functions are enabled for codegen (a function disabled for
        //    codegen is not an allowlist root), so this run generates the functions too, as
        //    `unsafe extern "C" { ... }` blocks, and `strip_extern_blocks` drops them.
        let mut builder = base_builder(&wrapper, &include).merge_extern_blocks(false);
        for (_, _, functions) in LIBRARIES {
            builder = builder.allowlist_function(functions);
        }
        for ty in EXTRA_TYPES {
            builder = builder.allowlist_type(ty);
        }
        for var in VARS {
            builder = builder.allowlist_var(var);
        }
        let mut text = strip_extern_blocks(
            &builder
                .generate()
                .expect("bindgen (types) failed")
                .to_string(),
        );

        // 2. One module per library: only the functions, as a struct of dynamically loaded
        //    symbols.
        for (module, library, functions) in LIBRARIES {
            let functions = base_builder(&wrapper, &include)
                .with_codegen_config(bindgen::CodegenConfig::FUNCTIONS)
                .allowlist_function(functions)
                .dynamic_library_name(*library)
                .dynamic_link_require_all(false)
                .generate()
                .unwrap_or_else(|e| panic!("bindgen ({module}) failed: {e}"))
                .to_string();
            write!(
                text,
                "\npub mod {module} {{\nuse super::*;\n\n{functions}}}\n"
            )
            .unwrap();
        }

        std::fs::write(&out, text).unwrap_or_else(|e| panic!("writing {}: {e}", out.display()));
    }
}
