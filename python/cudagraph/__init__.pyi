from ._cudagraph import (
    CompileError as CompileError,
    CudaError as CudaError,
    CudaGraphError as CudaGraphError,
    Dag as Dag,
    Device as Device,
    DeviceBuffer as DeviceBuffer,
    Exec as Exec,
    FftPlan as FftPlan,
    HostBuffer as HostBuffer,
    HostCallbackError as HostCallbackError,
    Kernel as Kernel,
    LibraryError as LibraryError,
    Module as Module,
    Node as Node,
    NoGpuError as NoGpuError,
    RecordingBackend as RecordingBackend,
    Stream as Stream,
    UpdateRefusedError as UpdateRefusedError,
    ValidationError as ValidationError,
    __version__ as __version__,
)

__all__: list[str]

def gpu_available() -> bool: ...
