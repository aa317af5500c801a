"""Shared fixtures of the Python suite.

GPU tests are marked ``gpu`` (and take the ``device`` fixture): they run when a GPU can be
used, are SKIPPED with the reason when none can, and FAIL instead when
``CUDAGRAPH_REQUIRE_GPU=1`` is set (the rule of the Rust GPU suite, tests/gpu/common.rs).
Tests needing CuPy or PyTorch are skipped when those are not installed, also under
``CUDAGRAPH_REQUIRE_GPU=1`` unless ``CUDAGRAPH_REQUIRE_INTEROP=1`` is set too.
"""

import os

# NVLink multicast off for the collective tests, set the way a Python program sets it: at the
# top, before CUDA or NCCL is loaded or any thread started (cudagraph refuses to load NCCL with
# the variable unset).
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import pytest  # noqa: E402

import cudagraph as cg  # noqa: E402


def _gpu_required() -> bool:
    return os.environ.get("CUDAGRAPH_REQUIRE_GPU") == "1"


def _interop_required() -> bool:
    return os.environ.get("CUDAGRAPH_REQUIRE_INTEROP") == "1"


_DEVICE = None
_REASON = None


def _open_device():
    global _DEVICE, _REASON
    if _DEVICE is None and _REASON is None:
        try:
            _DEVICE = cg.Device(0)
        except cg.CudaGraphError as e:
            _REASON = str(e)
    return _DEVICE, _REASON


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a GPU (skipped without one)")


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    device, reason = _open_device()
    if device is not None:
        return
    for item in gpu_items:
        if _gpu_required():
            # Left to run: the `device` fixture fails it, naming the reason.
            continue
        item.add_marker(pytest.mark.skip(reason=f"no GPU: {reason}"))


@pytest.fixture(scope="session")
def device():
    """Device 0; a failure under CUDAGRAPH_REQUIRE_GPU=1 when there is none."""
    dev, reason = _open_device()
    if dev is None:
        if _gpu_required():
            pytest.fail(f"CUDAGRAPH_REQUIRE_GPU=1 but the GPU cannot be used: {reason}")
        pytest.skip(f"no GPU: {reason}")
    return dev


def _import_or_skip(name):
    try:
        return __import__(name)
    except ImportError as e:
        if _interop_required():
            pytest.fail(f"CUDAGRAPH_REQUIRE_INTEROP=1 but {name} cannot be imported: {e}")
        pytest.skip(f"{name} is not installed")


@pytest.fixture
def cupy():
    """CuPy, or the test is skipped (failed under CUDAGRAPH_REQUIRE_INTEROP=1)."""
    return _import_or_skip("cupy")


@pytest.fixture
def torch():
    """PyTorch with CUDA, or the test is skipped (failed under CUDAGRAPH_REQUIRE_INTEROP=1)."""
    torch = _import_or_skip("torch")
    if not torch.cuda.is_available():
        if _interop_required():
            pytest.fail("CUDAGRAPH_REQUIRE_INTEROP=1 but torch.cuda is not available")
        pytest.skip("PyTorch has no CUDA device")
    return torch


@pytest.fixture
def jax():
    """JAX with a CUDA device, or the test is skipped (failed under CUDAGRAPH_REQUIRE_INTEROP=1).
    JAX is told not to preallocate most of the GPU's memory (its default)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = _import_or_skip("jax")
    try:
        gpus = jax.devices("gpu")
    except RuntimeError:
        gpus = []
    if not gpus:
        if _interop_required():
            pytest.fail("CUDAGRAPH_REQUIRE_INTEROP=1 but JAX has no GPU device")
        pytest.skip("JAX has no GPU device")
    return jax


@pytest.fixture
def rec():
    """A fresh recording backend."""
    return cg.RecordingBackend()


class FakeCudaArray:
    """An object exposing only ``__cuda_array_interface__`` (as CuPy, PyTorch and Numba do)."""

    def __init__(self, shape, typestr="<f4", ptr=0x7F00_0000, strides=None, **extra):
        if isinstance(shape, int):
            shape = (shape,)
        self.__cuda_array_interface__ = dict(
            shape=tuple(shape), typestr=typestr, data=(ptr, False), version=3, strides=strides
        )
        self.__cuda_array_interface__.update(extra)


@pytest.fixture
def fake():
    """The FakeCudaArray class."""
    return FakeCudaArray
