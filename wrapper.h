/* The C API surface cudagraph binds. bindgen turns this into src/sys/bindings.rs (see build.rs and
 * scripts/regen-bindings). Editing this file changes its hash, and a test then asks for the
 * bindings to be regenerated. */
#include <cuda_runtime_api.h>
#include <cufft.h>
#include <cufftXt.h>
#include <nvrtc.h>
