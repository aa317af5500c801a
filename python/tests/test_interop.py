"""Host-only tests of other libraries' arrays and streams: ``__cuda_array_interface__``
checks, what is kept alive, host-callable exceptions."""

import gc
import sys
import weakref

import numpy as np
import pytest

import cudagraph as cg


def test_a_foreign_array_is_kept_alive_by_the_dag(rec, fake):
    x = fake(1024)
    before = sys.getrefcount(x)
    dag = cg.Dag(backend=rec)
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag.add_kernel(k, 4, 256, [x, 2.0, 1024])
    assert sys.getrefcount(x) == before + 1, "the node holds one reference"
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is not None, "alive while the DAG uses it"
    del dag
    gc.collect()
    assert ref() is None, "released with the DAG"


def test_a_foreign_array_is_kept_alive_by_a_child_copy(rec, fake):
    x = fake(16)
    ref = weakref.ref(x)
    child = cg.Dag(backend=rec)
    child.add_memset(x, np.float32(0))
    parent = cg.Dag()
    parent.add_child(child)
    del x, child
    gc.collect()
    assert ref() is not None, "the parent's child graph holds it"
    del parent
    gc.collect()
    assert ref() is None


def test_a_refused_node_keeps_nothing(rec, fake):
    x = fake(4)
    before = sys.getrefcount(x)
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError):
        dag.add_copy(x, rec.host_buffer(8))  # 16 bytes vs 32
    gc.collect()
    assert sys.getrefcount(x) == before


def test_copy_between_foreign_and_pinned_memory_lowers(rec, fake):
    x = fake((4, 4), ptr=0x7F00_1000)
    h = rec.host_buffer((4, 4))
    dag = cg.Dag(backend=rec)
    dag.add_copy(h, x)
    dag.lower(rec)
    assert "bytes=64" in rec.calls()[0]["params"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(shape=4, typestr="<f4", strides=(8,)), "not C-contiguous"),
        (dict(shape=(2, 3), typestr="<f4", strides=(4, 8)), "not C-contiguous"),
        (dict(shape=4, typestr=">f4"), "big-endian"),
        (dict(shape=4, typestr="<V8"), "unsupported dtype"),
        (dict(shape=4, typestr="<f4", ptr=0), "null"),
        (dict(shape=4, typestr="<f4", ptr=0x7F00_0002), "not aligned to the 4-byte elements"),
        (dict(shape=4, typestr="<c16", ptr=0x7F00_0008), "not aligned to the 16-byte elements"),
        (dict(shape=4, typestr="<f4", mask=object()), "masked"),
        (dict(shape=4, typestr="<f4", stream=0), "stream` is 0"),
    ],
)
def test_cuda_array_interface_is_checked(rec, fake, kwargs, message):
    x = fake(**kwargs)
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match=message):
        dag.add_memset(x, np.uint8(0))


def test_c_contiguous_strides_and_unit_dimensions_are_accepted(rec, fake):
    dag = cg.Dag(backend=rec)
    dag.add_memset(fake((2, 3), strides=(12, 4)), np.float32(0))
    dag.add_memset(fake((3, 1), strides=(4, 400)), np.float32(0))  # length-1 dim: any stride
    assert len(dag) == 2


def test_foreign_array_dtype_is_checked_against_the_kernel(rec, fake):
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="points to float32 but the array holds float64"):
        dag.add_kernel(k, 1, 1, [fake(4, typestr="<f8"), 1.0, 4])


def test_a_foreign_array_on_the_host_is_refused_by_its_dlpack_device(fake):
    """Device checks need a GPU Dag; the DLPack device is read before any CUDA call."""

    class HostArray:
        __cuda_array_interface__ = dict(shape=(4,), typestr="<f4", data=(0x1000, False), version=3)

        def __dlpack_device__(self):
            return (1, 0)  # kDLCPU

    try:
        dev = cg.Device(0)
    except cg.NoGpuError:
        pytest.skip("the check runs where a Device can be opened")
    dag = cg.Dag(backend=dev)
    with pytest.raises(cg.ValidationError, match="not in device memory"):
        dag.add_memset(HostArray(), np.float32(0))


def test_host_callable_exception_becomes_host_callback_error_with_cause():
    def boom():
        raise ValueError("bad block 7")

    err = cg._cudagraph._run_as_host_node(boom)
    assert isinstance(err, cg.HostCallbackError)
    assert "ValueError: bad block 7" in str(err)
    assert isinstance(err.__cause__, ValueError)
    assert str(err.__cause__) == "bad block 7"


def test_host_callable_runs_with_the_gil_on_another_thread():
    import threading

    seen = []
    main = threading.get_ident()
    assert cg._cudagraph._run_as_host_node(lambda: seen.append(threading.get_ident())) is None
    assert len(seen) == 1 and seen[0] != main


def test_host_callable_is_kept_alive_by_the_dag(rec):
    class Callable:
        def __call__(self):
            pass

    c = Callable()
    ref = weakref.ref(c)
    dag = cg.Dag()
    dag.add_host(c)
    del c
    gc.collect()
    assert ref() is not None
    del dag
    gc.collect()
    assert ref() is None


def test_no_gpu_is_reported_clearly():
    if cg.gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(cg.NoGpuError, match="no GPU was found"):
        cg.Device(0)
    with pytest.raises(cg.NoGpuError):
        cg.Dag().instantiate()
    with pytest.raises(cg.NoGpuError):
        cg.DeviceBuffer(4)


def _read_only(fake, n=4, **kw):
    return fake(n, data=(0x7F00_0000, True), **kw)


def test_a_read_only_array_is_refused_as_a_destination(rec, fake):
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="copy destination: the array is read-only"):
        dag.add_copy(_read_only(fake), rec.host_buffer(4))
    with pytest.raises(cg.ValidationError, match="memset destination: the array is read-only"):
        dag.add_memset(_read_only(fake), np.float32(0))
    dag.add_copy(rec.host_buffer(4), _read_only(fake))  # a source: fine
    assert len(dag) == 1


def test_a_read_only_array_is_a_kernel_argument_only_for_a_pointer_to_const(rec, fake):
    dag = cg.Dag(backend=rec)
    writes = rec.kernel("scale", signature="float* x, float a, int n")
    with pytest.raises(cg.ValidationError, match="read-only .* not a pointer to const"):
        dag.add_kernel(writes, 1, 4, [_read_only(fake), 2.0, 4])
    reads = rec.kernel("sum", signature="const float* x, float* out")
    dag.add_kernel(reads, 1, 4, [_read_only(fake), fake(1)])
    unknown = rec.kernel("k", [8])
    with pytest.raises(cg.ValidationError, match="parameter types are not known"):
        dag.add_kernel(unknown, 1, 4, [_read_only(fake)])
    dag.add_kernel(unknown, 1, 4, [fake(4)])  # writable: fine
    assert len(dag) == 2


def test_a_cuda_array_interface_stream_that_is_not_an_int_is_a_validation_error(rec, fake):
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="`stream` is not None or a stream handle"):
        dag.add_memset(fake(4, stream="default"), np.float32(0))


def test_a_callable_failing_again_keeps_only_its_latest_exception():
    raised = []

    def boom():
        e = ValueError("bad block")
        raised.append(e)
        raise e

    before = cg._cudagraph._host_errors_len()
    for _ in range(3):
        assert cg._cudagraph._run_as_host_node(boom, report=False) is None
    assert cg._cudagraph._host_errors_len() == before + 1, "one kept per message"
    err = cg._cudagraph._run_as_host_node(boom)
    assert err.__cause__ is raised[-1], "the latest exception is the cause"
    assert cg._cudagraph._host_errors_len() == before
