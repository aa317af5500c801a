"""Build CUDA graphs explicitly as DAGs from Python: validate them, draw them as DOT,
instantiate, launch and update them.

The Python face of the cudagraph Rust crate. A :class:`Dag` holds kernel, copy, memset,
host-callable, empty, child-graph, FFT, cuBLAS GEMM, NCCL collective, event record/wait,
conditional (IF, IF/ELSE, WHILE, SWITCH), graph-memory (allocation, free) and captured nodes,
programmatic edges, kernel launch attributes and device-updatable kernel nodes; each ``add_*``
checks its node at once (argument sizes and types, launch shapes, copy bounds) and a cycle is
refused, raising
:class:`ValidationError` naming the node. ``Dag.instantiate(device)`` makes an :class:`Exec` to
launch many times and update between launches.

Without a GPU, build, validate, lower and draw DAGs against a :class:`RecordingBackend`::

    import numpy as np
    import cudagraph as cg

    rec = cg.RecordingBackend()
    x = rec.device_buffer(1024, "float32")
    scale = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag()
    k = dag.add_kernel(scale, grid=4, block=256, args=[x, np.float32(2.0), 1024], name="scale x")
    dag.lower(rec)
    print(dag.to_dot())

On a GPU::

    dev = cg.Device(0)
    mod = cg.Module.from_source(SOURCE, dev)
    exec = dag.instantiate(dev)
    exec.launch()
    exec.synchronize()

Arrays of other libraries (CuPy, PyTorch, Numba, JAX: anything with ``__cuda_array_interface__``;
array-API libraries: anything with ``__dlpack__`` on a CUDA device) are accepted
wherever a device buffer is, and kept alive while a DAG or Exec may use them;
``Exec.launch`` takes their streams (``__cuda_stream__``, CuPy's ``.ptr``, PyTorch's
``.cuda_stream``). The reference is to the array object, not its memory: a producer that
reallocates under a live object (PyTorch's ``resize_``, ``set_``, ``.data =``) frees memory a
graph still uses, which is the caller's to avoid. An array's ``stream`` is synchronised when the
node is added or its arguments set, not at each launch.

Host callables must not call CUDA or wait for the GPU (``ValidationError`` there). ``Dag`` and
``Exec`` may be used from any thread, one call at a time; ``RecordingBackend`` is used and
dropped on the thread that made it; reference
cycles through host callables are not collected (break them, or ``del`` the ``Exec``). See
``python/README.md``, "The caller's contract".
"""

import atexit as _atexit

from ._cudagraph import (
    CONDITIONAL_INCLUDE,
    DEVICE_UPDATE_INCLUDE,
    Blas,
    CaptureStream,
    Comm,
    Communicators,
    CompileError,
    Conditional,
    CudaError,
    CudaGraphError,
    Dag,
    Device,
    DeviceBuffer,
    DeviceNode,
    Event,
    Exec,
    FftPlan,
    GraphBuffer,
    HostBuffer,
    HostCallbackError,
    In,
    InOut,
    Kernel,
    LibraryError,
    Module,
    Node,
    NoGpuError,
    Out,
    Profile,
    RecordingBackend,
    Stream,
    UpdateRefusedError,
    ValidationError,
    __version__,
)
from . import _cudagraph

__all__ = [
    "CONDITIONAL_INCLUDE",
    "DEVICE_UPDATE_INCLUDE",
    "Blas",
    "CaptureStream",
    "Comm",
    "Communicators",
    "CompileError",
    "Conditional",
    "CudaError",
    "CudaGraphError",
    "Dag",
    "Device",
    "DeviceBuffer",
    "DeviceNode",
    "Event",
    "Exec",
    "FftPlan",
    "GraphBuffer",
    "HostBuffer",
    "HostCallbackError",
    "In",
    "InOut",
    "Kernel",
    "LibraryError",
    "Module",
    "Node",
    "NoGpuError",
    "Out",
    "Profile",
    "RecordingBackend",
    "Stream",
    "UpdateRefusedError",
    "ValidationError",
    "gpu_available",
    "__version__",
]


def gpu_available() -> bool:
    """Whether a GPU can be used (a driver, the CUDA 13 runtime and at least one device)."""
    try:
        return Device.count() > 0
    except CudaGraphError:
        return False


# Host nodes still queued at exit take the GIL: let them run before the interpreter finalizes;
# host nodes run later (launched by threads that outlive this hook) skip their callables.
_atexit.register(_cudagraph._at_exit)
