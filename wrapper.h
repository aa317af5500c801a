/* The C API surface cudagraph binds. bindgen turns this into src/sys/bindings.rs (see build.rs and
 * scripts/regen-bindings). Editing this file changes its hash, and a test then asks for the
 * bindings to be regenerated. */
#include <cuda_runtime_api.h>
/* The driver API, for the few calls the runtime makes slower than they need to be (see
 * src/result/driver.rs and build.rs's list of driver functions). */
#include <cuda.h>
#include <cufft.h>
#include <cufftXt.h>
#include <nvrtc.h>
/* NCCL, from the nvidia-nccl-cu13 wheel. nccl.h includes cuda_fp16.h and cuda_bf16.h, which need
 * libcu++ (<nv/target>, not in the pinned wheels); its API uses none of their types (half
 * precision is the enum value ncclFloat16), so their include guards are defined to skip them. */
#define __CUDA_FP16_H__
#define __CUDA_BF16_H__
#include <nccl.h>
/* cuBLAS, from the nvidia-cublas wheel: the few calls a GEMM node makes (build.rs's list). Its
 * half-precision declarations are C++-only, so the fp16/bf16 headers skipped above are not
 * missed. */
#include <cublas_v2.h>
