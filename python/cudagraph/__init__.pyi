from ._cudagraph import (
    CONDITIONAL_INCLUDE as CONDITIONAL_INCLUDE,
    DEVICE_UPDATE_INCLUDE as DEVICE_UPDATE_INCLUDE,
    Blas as Blas,
    CaptureStream as CaptureStream,
    CompileError as CompileError,
    Conditional as Conditional,
    CudaError as CudaError,
    CudaGraphError as CudaGraphError,
    Dag as Dag,
    Device as Device,
    DeviceBuffer as DeviceBuffer,
    DeviceNode as DeviceNode,
    Event as Event,
    Exec as Exec,
    FftPlan as FftPlan,
    GraphBuffer as GraphBuffer,
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
