"""GPU tests: results of every node kind against NumPy, with cudagraph buffers, CuPy arrays and
PyTorch tensors as operands. Skipped with the reason without a GPU (failed under
CUDAGRAPH_REQUIRE_GPU=1); the CuPy and PyTorch ones skipped when those are not installed."""

import gc
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import cudagraph as cg

pytestmark = pytest.mark.gpu

SOURCE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
extern "C" __global__ void add_to(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
"""

N = 1000
BLOCK = 256
GRID = (N + BLOCK - 1) // BLOCK


@pytest.fixture(scope="module")
def module(device):
    return cg.Module.from_source(SOURCE, device)


def test_kernel_copy_memset_and_host_nodes_against_numpy(device, module):
    data = np.arange(N, dtype=np.float32)
    host = cg.HostBuffer.from_numpy(data, device)
    out = cg.HostBuffer(N, "float32", device)
    ones = cg.HostBuffer(N, "float32", device)
    x = cg.DeviceBuffer(N, "float32", device)
    y = cg.DeviceBuffer(N, "float32", device)
    calls = []

    dag = cg.Dag()
    up = dag.add_copy(x, host, name="upload")
    fill = dag.add_memset(y, np.float32(1.0), name="ones")
    k = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 2.0, N], name="scale")
    add = dag.add_kernel(module.kernel("add_to"), GRID, BLOCK, [y, x, N], name="add")
    down = dag.add_copy(out, y, name="download")
    down1 = dag.add_copy(ones, y)
    tick = dag.add_host(lambda: calls.append(len(calls)), name="tick")
    dag.chain([up, k, add, down, tick])
    dag.chain([fill, down1, add])

    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), 1.0 + 2.0 * data)
    np.testing.assert_array_equal(ones.to_numpy(), np.ones(N, np.float32))
    assert calls == [0]

    # Per-launch argument update, three launches, one synchronize.
    for a in (3.0, 4.0, 5.0):
        exec.set_kernel_arg(k, 1, a)
        exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(out.to_numpy(), 1.0 + 5.0 * data)
    assert calls == [0, 1, 2, 3]
    np.testing.assert_array_equal(x.to_numpy(), 5.0 * data)


def test_set_enabled_and_whole_graph_update(device, module):
    x = cg.DeviceBuffer.from_numpy(np.ones(N, np.float32), device)
    scale = module.kernel("scale")

    def build(a):
        dag = cg.Dag()
        return dag, dag.add_kernel(scale, GRID, BLOCK, [x, np.float32(a), np.int32(N)])

    dag, k = build(2.0)
    exec = dag.instantiate(device)
    exec.launch()
    exec.set_enabled(k, False)
    exec.launch()  # does nothing
    exec.set_enabled(k, True)
    dag3, _ = build(3.0)
    exec.update(dag3)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), np.full(N, 6.0, np.float32))
    # The first DAG's nodes stay valid after the update (same indices).
    exec.set_kernel_arg(k, 1, 0.5)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), np.full(N, 3.0, np.float32))
    # Errors name the argument, and an index past the parameters is refused as such.
    with pytest.raises(cg.ValidationError, match="argument 2"):
        exec.set_kernel_arg(k, 2, "many")
    with pytest.raises(cg.ValidationError, match="argument 3: the kernel has 3 parameters"):
        exec.set_kernel_arg(k, 3, 1)
    other = cg.Dag()
    other.add_empty()
    with pytest.raises(cg.UpdateRefusedError):
        exec.update(other)


def test_host_callable_exception_is_reported_at_synchronize_then_cleared(device):
    state = {"fail": True}

    def host():
        if state["fail"]:
            raise RuntimeError("pipeline stalled")

    dag = cg.Dag()
    dag.add_host(host, name="check")
    exec = dag.instantiate(device)
    exec.launch()
    with pytest.raises(cg.HostCallbackError, match="check") as e:
        exec.synchronize()
    assert isinstance(e.value.__cause__, RuntimeError)
    assert "pipeline stalled" in str(e.value.__cause__)
    state["fail"] = False
    exec.launch()
    exec.synchronize()  # nothing left to report


def test_device_buffer_round_trip_and_cuda_array_interface(device):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = cg.DeviceBuffer.from_numpy(a, device)
    assert b.shape == (3, 4) and b.dtype == "<i4" and b.device == device.ordinal
    np.testing.assert_array_equal(b.to_numpy(), a)
    cai = b.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (3, 4) and cai["typestr"] == "<i4"
    assert cai["data"][0] != 0
    b.copy_from(a * 2)
    np.testing.assert_array_equal(b.to_numpy(), a * 2)


def _read_back(device, ptr, n):
    """``n`` float32 at device address ``ptr``, read by a cudagraph copy node."""
    out = cg.HostBuffer(n, "float32", device)
    dag = cg.Dag(backend=device)
    dag.add_copy(out, CaiView(ptr, n, None))
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    return out.to_numpy()


def test_dlpack_capsules_keep_the_memory_alive(device):
    import ctypes

    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.restype = ctypes.c_int
    is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    data = np.arange(8, dtype=np.float32)
    b = cg.DeviceBuffer.from_numpy(data, device)
    assert b.__dlpack_device__() == (2, device.ordinal)
    legacy = b.__dlpack__()
    assert is_valid(legacy, b"dltensor") == 1
    versioned = b.__dlpack__(max_version=(1, 0))
    assert is_valid(versioned, b"dltensor_versioned") == 1
    with pytest.raises(BufferError):
        b.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        b.__dlpack__(dl_device=(1, 0))
    # DLManagedTensor starts with DLTensor, whose first field is `data`; the versioned one
    # has (version, manager_ctx, deleter, flags) first: 8 + 8 + 8 + 8 bytes.
    legacy_data = ctypes.c_void_p.from_address(get_pointer(legacy, b"dltensor")).value
    versioned_data = ctypes.c_void_p.from_address(
        get_pointer(versioned, b"dltensor_versioned") + 32
    ).value
    assert legacy_data == versioned_data == b.__cuda_array_interface__["data"][0]
    ref = weakref.ref(b) if hasattr(b, "__weakref__") else None
    del b
    gc.collect()
    assert ref is None or ref() is None
    # The buffer object is gone; the capsules' tensors still hold the memory.
    np.testing.assert_array_equal(_read_back(device, legacy_data, 8), data)
    del legacy
    gc.collect()
    np.testing.assert_array_equal(_read_back(device, versioned_data, 8), data)
    del versioned  # the capsules' destructors free their tensors
    gc.collect()


def test_dlpack_consumed_by_torch_or_cupy_outlives_the_buffer(device):
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError
        from_dlpack, to_host = torch.from_dlpack, lambda t: t.cpu().numpy()
    except ImportError:
        try:
            import cupy
        except ImportError:
            pytest.skip("neither PyTorch with CUDA nor CuPy is installed")
        from_dlpack, to_host = cupy.from_dlpack, cupy.asnumpy
    data = np.arange(16, dtype=np.float32)
    b = cg.DeviceBuffer.from_numpy(data, device)
    t = from_dlpack(b)
    del b
    gc.collect()
    np.testing.assert_array_equal(to_host(t), data)
    del t
    gc.collect()


def _doubling_exec(device, module):
    """A buffer of N ones and an ``Exec`` whose launch doubles it."""
    x = cg.DeviceBuffer.from_numpy(np.ones(N, np.float32), device)
    dag = cg.Dag()
    dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 2.0, N])
    return x, dag.instantiate(device)


def test_launch_on_a_stream_given_by_the_cuda_stream_protocol(device, module):
    ours = cg.Stream(device)

    class ProtocolStream:  # as cuda.core's Stream exposes it
        def __cuda_stream__(self):
            return (0, ours.ptr)

    x, exec = _doubling_exec(device, module)
    s = ProtocolStream()
    exec.launch(s)
    exec.launch(s)
    exec.launch(ours)
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), np.full(N, 8.0, np.float32))


def test_a_foreign_stream_object_is_read_once_and_another_object_again(device, module):
    ours = cg.Stream(device)

    class CountingStream:
        calls = 0

        def __cuda_stream__(self):
            CountingStream.calls += 1
            return (0, ours.ptr)

    x, exec = _doubling_exec(device, module)
    first = CountingStream()
    for _ in range(3):
        exec.launch(first)
    assert CountingStream.calls == 1, "the same object: its handle is read at its first launch"
    second = CountingStream()
    exec.launch(second)
    exec.launch(second)
    assert CountingStream.calls == 3, "another object (same handle): read at each launch"
    exec.launch(first)
    assert CountingStream.calls == 3, "the cached object is still recognised"
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), np.full(N, 64.0, np.float32))


class CaiView:
    """Only ``__cuda_array_interface__``, over another object's memory (kept by ``owner``)."""

    def __init__(self, ptr, n, owner, typestr="<f4"):
        self.owner = owner
        self.__cuda_array_interface__ = dict(
            shape=(n,), typestr=typestr, data=(ptr, False), version=3, strides=None
        )


def test_a_foreign_view_of_device_memory_is_used_and_host_memory_refused(device, module):
    backing = cg.DeviceBuffer.from_numpy(np.ones(N, np.float32), device)
    view = CaiView(backing.__cuda_array_interface__["data"][0], N, backing)
    dag = cg.Dag(backend=device)
    dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [view, 4.0, N])
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(backing.to_numpy(), np.full(N, 4.0, np.float32))

    host = np.zeros(N, np.float32)
    with pytest.raises(cg.ValidationError, match="not device memory"):
        dag.add_memset(CaiView(host.ctypes.data, N, host), np.float32(0))


def test_exiting_with_a_host_node_queued_runs_it_and_exits_cleanly(device):
    code = (
        "import time, cudagraph as cg\n"
        "dag = cg.Dag()\n"
        "dag.add_host(lambda: (time.sleep(0.2), print('host node ran', flush=True)))\n"
        "e = dag.instantiate(cg.Device(0))\n"
        "e.launch()\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "host node ran" in r.stdout


def test_compile_error_carries_the_log(device):
    with pytest.raises(cg.CompileError, match="undefined"):
        cg.Module.from_source('extern "C" __global__ void k() { undefined_thing(); }', device)


def test_no_device_memory_leak_over_10000_launches(device, module):
    x = cg.DeviceBuffer(N, "float32", device)
    dag = cg.Dag()
    dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 1.0, N])
    dag.add_host(lambda: None)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    free_before, _ = device.memory_info()
    for _ in range(10_000):
        exec.launch()
    exec.synchronize()
    free_after, _ = device.memory_info()
    assert free_before - free_after < 2 << 20, (free_before, free_after)


# --- CuPy and PyTorch operands ---


def test_cupy_arrays_as_operands_and_stream(device, module, cupy):
    x = cupy.arange(N, dtype=cupy.float32)
    y = cupy.zeros(N, dtype=cupy.float32)
    ref = weakref.ref(x)
    dag = cg.Dag(backend=device)
    k = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, np.float32(3.0), np.int32(N)])
    c = dag.add_copy(y, x)
    dag.add_dependency(k, c)
    exec = dag.instantiate(device)
    expected = 3.0 * cupy.asnumpy(x)
    del x
    gc.collect()
    assert ref() is not None, "the DAG keeps the CuPy array alive"
    stream = cupy.cuda.Stream(non_blocking=True)
    exec.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), expected)
    # A cudagraph buffer seen by CuPy through __cuda_array_interface__ and DLPack.
    b = cg.DeviceBuffer.from_numpy(np.arange(4, dtype=np.float32), device)
    np.testing.assert_array_equal(cupy.asnumpy(cupy.asarray(b)), np.arange(4, dtype=np.float32))
    via_dlpack = cupy.from_dlpack(b)
    del b
    gc.collect()
    np.testing.assert_array_equal(cupy.asnumpy(via_dlpack), np.arange(4, dtype=np.float32))
    del dag, exec
    gc.collect()
    assert ref() is None, "released with the DAG and the Exec"


def test_cupy_dtype_and_layout_are_checked(device, module, cupy):
    dag = cg.Dag(backend=device)
    with pytest.raises(cg.ValidationError, match="holds float64"):
        dag.add_kernel(module.kernel("scale"), 1, 1, [cupy.zeros(4), 1.0, 4])
    with pytest.raises(cg.ValidationError, match="not C-contiguous"):
        dag.add_kernel(
            module.kernel("scale"), 1, 1, [cupy.zeros((4, 4), cupy.float32).T, 1.0, 16]
        )


def test_torch_tensors_as_operands_and_stream(device, module, torch):
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = torch.zeros(N, dtype=torch.float32, device="cuda")
    dag = cg.Dag(backend=device)
    k = dag.add_kernel(module.kernel("add_to"), GRID, BLOCK, [y, x, N])
    m = dag.add_memset(x, np.float32(0.5))
    dag.add_dependency(k, m)
    exec = dag.instantiate(device)
    expected = torch.arange(N, dtype=torch.float32).numpy()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    exec.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), expected)
    np.testing.assert_array_equal(x.cpu().numpy(), np.full(N, 0.5, np.float32))
    exec.launch(stream)
    stream.synchronize()
    np.testing.assert_array_equal(y.cpu().numpy(), expected + 0.5)
    # A cudagraph buffer as a tensor through DLPack, alive after the buffer is gone.
    b = cg.DeviceBuffer.from_numpy(np.arange(6, dtype=np.int64).reshape(2, 3), device)
    t = torch.from_dlpack(b)
    del b
    gc.collect()
    assert t.shape == (2, 3) and t.dtype == torch.int64 and t.is_cuda
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(6).reshape(2, 3))


class DlpackOnly:
    """Another library's array seen only through DLPack (as a JAX array is: no
    ``__cuda_array_interface__``)."""

    def __init__(self, array):
        self.array = array

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)


def test_dlpack_only_arrays_of_torch_and_cupy_as_operands(device, module, torch, cupy):
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = cupy.zeros(N, dtype=cupy.float32)
    dag = cg.Dag(backend=device)
    k = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [DlpackOnly(x), np.float32(2.0), N])
    c = dag.add_copy(DlpackOnly(y), DlpackOnly(x))
    dag.add_dependency(k, c)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    expected = 2.0 * np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(x.cpu().numpy(), expected)
    np.testing.assert_array_equal(cupy.asnumpy(y), expected)
    # The tensor taken from the capsule keeps the storage: the graph still writes live memory
    # after the producer's own reference is gone.
    held = torch.cuda.memory_allocated()
    del x, k, c
    gc.collect()
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), 2.0 * expected)
    del dag, exec
    gc.collect()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= held - N * 4, "the tensor's deleter freed it"
    # A transposed view is refused by its strides, and a tensor on the CPU by its device.
    dag = cg.Dag(backend=device)
    with pytest.raises(cg.ValidationError, match="not C-contiguous"):
        dag.add_memset(DlpackOnly(torch.zeros((4, 4), device="cuda").T), np.float32(0))
    with pytest.raises(cg.ValidationError, match="expected a DeviceBuffer"):
        dag.add_memset(DlpackOnly(torch.zeros(4)), np.float32(0))


def test_jax_arrays_read_in_place_through_either_protocol(device, module, jax, cupy):
    """A JAX array as a copy source, through its __cuda_array_interface__ and through DLPack
    alone (the protocol an array-API library may be limited to)."""
    x = jax.device_put(jax.numpy.arange(N, dtype=jax.numpy.float32), jax.devices("gpu")[0])
    x.block_until_ready()
    y = cupy.zeros(N, dtype=cupy.float32)
    z = cupy.zeros(N, dtype=cupy.float32)
    dag = cg.Dag(backend=device)
    c = dag.add_copy(y, x)
    d = dag.add_copy(z, DlpackOnly(x))
    k = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [y, np.float32(3.0), N])
    dag.add_dependency(c, k)
    exec = dag.instantiate(device)
    del x
    gc.collect()
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), 3.0 * np.arange(N, dtype=np.float32))
    np.testing.assert_array_equal(cupy.asnumpy(z), np.arange(N, dtype=np.float32))
    del dag, d


def test_a_host_callable_exception_is_reported_when_the_exec_is_dropped(device):
    seen = []
    old = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        dag = cg.Dag()
        dag.add_host(lambda: 1 / 0, name="divide")
        ex = dag.instantiate(device)
        ex.launch()
        del ex
        gc.collect()
    finally:
        sys.unraisablehook = old
    assert len(seen) == 1, seen
    assert isinstance(seen[0].exc_value, cg.HostCallbackError)
    assert isinstance(seen[0].exc_value.__cause__, ZeroDivisionError)


# --- Profiling ---


def test_exec_profile_times_each_node(device, module):
    x = cg.DeviceBuffer(N, "float32", device)
    dag = cg.Dag()
    first = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 1.0, N], name="first")
    clear = dag.add_memset(x, np.float32(0), name="clear")
    dag.add_dependency(first, clear)
    exec = dag.instantiate(device)
    p = exec.profile(10)
    assert p.launches == 10
    assert {n["name"] for n in p.nodes} == {"first", "clear"}
    assert {n["kind"] for n in p.nodes} == {"kernel", "memset"}
    assert next(n["node"] for n in p.nodes if n["name"] == "first") == first
    assert abs(sum(n["share"] for n in p.nodes) - 1.0) < 1e-6
    assert all(0 <= n["min"] <= n["mean"] <= n["max"] for n in p.nodes)
    assert p.total == pytest.approx(sum(n["mean"] for n in p.nodes))
    assert p.launch_time is not None and p.launch_time >= 0.9 * p.total
    assert "first" in str(p) and "clear" in p.to_dot()
    with pytest.raises(cg.CudaGraphError, match="at least one launch"):
        exec.profile(0)


# --- GEMM nodes ---


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_gemm_of_row_major_arrays_against_numpy(device, dtype):
    """C = A·B for C-ordered A (m × k), B (k × n): add_gemm(B, A, C, m=n, n=m, k=k)."""
    rng = np.random.default_rng(7)
    m, n, k = 33, 17, 65

    def rand(shape):
        x = rng.standard_normal(shape)
        if dtype.startswith("complex"):
            x = x + 1j * rng.standard_normal(shape)
        return x.astype(dtype)

    a, b, c0 = rand((m, k)), rand((k, n)), rand((m, n))
    da, db = cg.DeviceBuffer.from_numpy(a, device), cg.DeviceBuffer.from_numpy(b, device)
    dc = cg.DeviceBuffer.from_numpy(c0, device)
    blas = cg.Blas(device)
    assert blas.version >= 130000
    alpha, beta = (2.0, 0.5) if dtype.startswith("float") else (1 - 1j, 0.25j)
    dag = cg.Dag()
    dag.add_gemm(blas, db, da, dc, m=n, n=m, k=k, alpha=alpha, beta=beta)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    expected = alpha * (a.astype(np.complex128) @ b) + beta * c0
    got = dc.to_numpy().reshape(m, n)
    # k·u relative to the magnitudes summed (u: the dtype's unit roundoff).
    u = np.finfo(a.real.dtype).eps / 2
    bound = k * u * (np.abs(alpha) * (np.abs(a) @ np.abs(b)) + np.abs(beta) * np.abs(c0))
    assert np.all(np.abs(got - expected) <= 4 * bound + 1e-30), np.max(np.abs(got - expected) / bound)


def test_gemm_of_cupy_arrays_as_column_major_matrices(device, cupy):
    m, n, k = 8, 5, 3
    a = cupy.asarray(np.arange(k * m, dtype=np.float32).reshape(k, m))  # stored k x m: Aᵀ is m x k
    b = cupy.asarray(np.arange(n * k, dtype=np.float32).reshape(n, k))
    c = cupy.zeros((n, m), dtype=cupy.float32)
    dag = cg.Dag(backend=device)
    # Column-major views: a is m x k (ld m), b is k x n (ld k), c is m x n (ld m).
    dag.add_gemm(cg.Blas(device), a, b, c, m=m, n=n, k=k)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    # One memory as A and C (the same array wrapped twice) is refused, by address.
    square = cupy.zeros(16, dtype=cupy.float32)
    with pytest.raises(cg.ValidationError, match="C overlaps A"):
        dag.add_gemm(cg.Blas(device), square, cupy.zeros(16, cupy.float32), square, m=4, n=4, k=4)
    A = cupy.asnumpy(a).T  # the column-major m x k matrix a holds
    B = cupy.asnumpy(b).T
    np.testing.assert_allclose(cupy.asnumpy(c).T, A @ B, rtol=1e-6)


# --- Collective (NCCL) nodes: one rank on one GPU ---


def test_collectives_of_one_rank_against_numpy(device, module):
    comms = cg.Communicators([device])
    comm = comms.comm(0)
    x = cg.DeviceBuffer.from_numpy(np.arange(N, dtype=np.float32), device)
    y = cg.DeviceBuffer(N, "float32", device)
    z = cg.DeviceBuffer(N, "float32", device)
    dag = cg.Dag()
    k = dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 2.0, N])
    r = dag.add_all_reduce(comm, x, y, op="sum")
    g = dag.add_all_gather(comm, y, z)
    dag.chain([k, r, g])
    comms.check_ranks([dag])
    with pytest.raises(cg.CudaGraphError):
        dag.instantiate(device)  # collectives instantiate only through their communicators
    (exec,) = comms.instantiate([dag])
    exec.launch()
    exec.synchronize()
    expected = 2.0 * np.arange(N, dtype=np.float32)
    np.testing.assert_array_equal(y.to_numpy(), expected)
    np.testing.assert_array_equal(z.to_numpy(), expected)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(z.to_numpy(), 2.0 * expected)


def test_communicators_with_nvls_unset_say_the_python_way(device):
    # A fresh interpreter without the variable: NCCL is not loaded, and the error tells a
    # Python user what to set (not the Rust call the crate's own message names).
    env = {k: v for k, v in os.environ.items() if k != "NCCL_NVLS_ENABLE"}
    code = "import cudagraph as cg; cg.Communicators([cg.Device(0)])"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode != 0
    assert "NCCL_NVLS_ENABLE is unset" in run.stderr, run.stderr
    assert 'os.environ["NCCL_NVLS_ENABLE"] = "0"' in run.stderr, run.stderr
    assert "set_nccl_nvls_off" not in run.stderr, run.stderr


# --- FFT nodes ---


def test_fft_forward_then_inverse_with_one_plan_against_numpy(device):
    n, batch = 256, 4
    rng = np.random.default_rng(1)
    data = (rng.standard_normal((batch, n)) + 1j * rng.standard_normal((batch, n))).astype(
        np.complex64
    )
    x = cg.DeviceBuffer.from_numpy(data, device)
    spectrum = cg.DeviceBuffer((batch, n), "complex64", device)
    back = cg.DeviceBuffer((batch, n), "complex64", device)
    plan = cg.FftPlan("c2c", n, batch=batch, store="scale")
    dag = cg.Dag()
    f = dag.add_fft(plan, x, spectrum, "forward")
    i = dag.add_fft(plan, spectrum, back, "inverse", store_scale=1.0 / n)
    dag.add_dependency(f, i)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    np.testing.assert_allclose(spectrum.to_numpy(), np.fft.fft(data, axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(back.to_numpy(), data, rtol=1e-4, atol=1e-4)


def test_fft_per_launch_store_output_into_a_ring(device):
    n, slots, launches = 128, 4, 12
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(n).astype(np.complex64) for _ in range(launches)]
    host_in = cg.HostBuffer(n, "complex64", device)
    x = cg.DeviceBuffer(n, "complex64", device)
    scratch = cg.DeviceBuffer(n, "complex64", device)
    ring = [cg.DeviceBuffer(n, "complex64", device) for _ in range(slots)]
    plan = cg.FftPlan("c2c", n, store="scale")
    dag = cg.Dag()
    up = dag.add_copy(x, host_in)
    f = dag.add_fft(plan, x, scratch, "forward")
    i = dag.add_fft(plan, scratch, scratch, "inverse", store_scale=1.0 / n, store_output=ring[0])
    dag.chain([up, f, i])
    exec = dag.instantiate(device)
    results = {}
    for k in range(launches):
        host_in.copy_from(inputs[k])  # waits for the launches using it
        exec.set_fft_params(i, store_scale=1.0 / n, store_output=ring[k % slots])
        exec.launch()
        if k >= slots - 1:
            # The oldest slot is read after its launch; to_numpy waits for it.
            j = k - slots + 1
            results[j] = ring[j % slots].to_numpy()
    exec.synchronize()
    for j, got in results.items():
        np.testing.assert_allclose(got, inputs[j], rtol=1e-4, atol=1e-4)


# --- No deadlock with host nodes that need the GIL (each in a subprocess with a timeout) ---

_PRELUDE = r"""
import threading, time
import numpy as np
import cudagraph as cg
d = cg.Device(0)
SOURCE = %r
m = cg.Module.from_source(SOURCE, d)
def slow():
    time.sleep(0.05)
""" % SOURCE


def _run_script(body, timeout=120):
    code = _PRELUDE + body + "\nprint('OK', flush=True)\n"
    try:
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"deadlocked (no exit in {timeout} s): {e.stdout!r} {e.stderr!r}")
    assert r.returncode == 0, r.stderr
    assert "OK" in r.stdout, (r.stdout, r.stderr)


def test_deleting_exec_and_buffers_with_a_launch_pending_does_not_deadlock(device):
    _run_script(
        """
x = cg.DeviceBuffer(1024, device=d)
dag = cg.Dag()
a = dag.add_memset(x, np.float32(1))
h = dag.add_host(slow)
dag.chain([a, h])
ex = dag.instantiate(d)
for _ in range(4):
    ex.launch()
del dag, x
del ex  # waits for the launches (GIL released: the host nodes take it)
"""
    )


def test_reading_a_buffer_with_a_host_node_pending_does_not_deadlock(device):
    _run_script(
        """
x = cg.DeviceBuffer(1024, device=d)
dag = cg.Dag()
a = dag.add_memset(x, np.float32(3))
h = dag.add_host(slow)
dag.chain([h, a])
ex = dag.instantiate(d)
ex.launch()
assert (x.to_numpy() == 3).all()
ex.launch()
x.__cuda_array_interface__
ex.launch()
cap = x.__dlpack__()
del cap
ex.synchronize()
"""
    )


def test_300_set_kernel_arg_swaps_with_host_nodes_queued_do_not_deadlock(device):
    _run_script(
        """
bufs = [cg.DeviceBuffer.from_numpy(np.ones(1000, np.float32), d) for _ in range(2)]
dag = cg.Dag()
k = dag.add_kernel(m.kernel("scale"), 4, 256, [bufs[0], 1.0, 1000])
h = dag.add_host(lambda: time.sleep(0.001))
dag.chain([k, h])
ex = dag.instantiate(d)
for i in range(300):
    ex.set_kernel_arg(k, 0, bufs[i % 2])
    ex.launch()
for i in range(300):
    ex.set_kernel_args(k, [cg.DeviceBuffer(1000, device=d), 1.0, 1000])  # freed when done
    ex.launch()
ex.synchronize()
assert (bufs[0].to_numpy() == 1).all()
"""
    )


def test_set_kernel_arg_while_another_thread_reads_the_buffer_does_not_deadlock(device):
    _run_script(
        """
y = cg.DeviceBuffer.from_numpy(np.ones(1000, np.float32), d)
z = cg.DeviceBuffer.from_numpy(np.ones(1000, np.float32), d)
dag = cg.Dag()
k = dag.add_kernel(m.kernel("scale"), 4, 256, [y, 2.0, 1000])
h = dag.add_host(slow)
dag.chain([k, h])
ex = dag.instantiate(d)
for _ in range(3):
    ex.launch()
r = threading.Thread(target=lambda: [y.to_numpy() for _ in range(20)])
r.start()
for i in range(50):
    ex.set_kernel_arg(k, 0, (y, z)[i % 2])
    ex.launch()
r.join()
ex.synchronize()
"""
    )


def test_a_host_buffer_is_usable_by_another_thread_while_one_waits_on_it(device):
    _run_script(
        """
hb = cg.HostBuffer(1000, "float32", d)
x = cg.DeviceBuffer(1000, "float32", d)
dag = cg.Dag()
c = dag.add_copy(hb, x)
h = dag.add_host(lambda: time.sleep(0.3))
dag.chain([h, c])
ex = dag.instantiate(d)
ex.launch()
w = threading.Thread(target=lambda: hb.copy_from(np.ones(1000, np.float32)))
w.start()
time.sleep(0.05)
other = cg.Dag()
other.add_copy(x, hb)  # no "Already mutably borrowed"
w.join()
ex.synchronize()
"""
    )


def test_device_synchronize_inside_a_host_callable_raises_validation_error(device):
    _run_script(
        """
dag = cg.Dag()
dag.add_host(lambda: d.synchronize(), name="waits")
ex = dag.instantiate(d)
ex.launch()
try:
    ex.synchronize()
except cg.HostCallbackError as e:
    assert isinstance(e.__cause__, cg.ValidationError), repr(e.__cause__)
    assert "inside a host callable" in str(e.__cause__)
else:
    raise AssertionError("no HostCallbackError")
"""
    )


def test_buffers_dropped_inside_a_host_callable_are_freed_later(device):
    _run_script(
        """
bufs = [cg.DeviceBuffer(1 << 20, device=d) for _ in range(4)]
dag = cg.Dag()
dag.add_host(bufs.clear)
ex = dag.instantiate(d)
ex.launch()
ex.synchronize()
assert cg._cudagraph._graveyard_len() == 0, "emptied by synchronize"
"""
    )


def test_a_plain_int_stream_is_refused(device, module):
    x = cg.DeviceBuffer(N, "float32", device)
    dag = cg.Dag()
    dag.add_kernel(module.kernel("scale"), GRID, BLOCK, [x, 1.0, N])
    exec = dag.instantiate(device)
    with pytest.raises(cg.ValidationError, match="plain int"):
        exec.launch(cg.Stream(device).ptr)
