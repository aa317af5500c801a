"""Host-only tests of DLPack import: an array with ``__dlpack__`` but no
``__cuda_array_interface__`` (JAX, array-API libraries) is taken as DLPack's consumer takes it
(capsule renamed, deleter called once, when the last DAG using it is gone) and checked as the
interface is. The producer is ``dlpack_producer.DlpackArray``, a C-style producer in ctypes."""

import gc

import numpy as np
import pytest

import cudagraph as cg
import dlpack_producer
from dlpack_producer import DlpackArray


@pytest.fixture(autouse=True)
def no_tensor_left():
    """Every tensor a test's producer made is deleted by the end of the test."""
    before = len(dlpack_producer._LIVE)
    yield
    gc.collect()
    assert len(dlpack_producer._LIVE) == before, "a DLPack tensor was never deleted"


def test_a_dlpack_array_is_a_kernel_argument_and_its_tensor_is_deleted_with_the_dag(rec):
    x = DlpackArray(1024)
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag(backend=rec)
    dag.add_kernel(k, 4, 256, [x, 2.0, 1024])
    assert x.calls == [dict(stream=-1, max_version=(1, 0))], "a DLPack 1.0 consumer, no sync"
    assert x.deleted == 0, "the DAG owns the tensor"
    dag.lower(rec)
    assert "kernel" in rec.calls()[0]["kind"]
    del dag
    gc.collect()
    assert x.deleted == 1, "deleted once, with the DAG"


def test_a_child_copy_keeps_the_tensor(rec):
    x = DlpackArray(16)
    child = cg.Dag(backend=rec)
    child.add_memset(x, np.float32(0))
    parent = cg.Dag()
    parent.add_child(child)
    del child
    gc.collect()
    assert x.deleted == 0, "the parent's child graph holds it"
    del parent
    gc.collect()
    assert x.deleted == 1


def test_copies_and_memsets_take_dlpack_arrays_with_their_size(rec):
    x = DlpackArray((4, 4))
    h = rec.host_buffer((4, 4))
    dag = cg.Dag(backend=rec)
    dag.add_copy(h, x)
    dag.add_memset(DlpackArray(8, dtype=(1, 8, 1)), np.uint8(7))
    dag.lower(rec)
    params = [c["params"] for c in rec.calls()]
    assert any("bytes=64" in p for p in params), params


def test_a_pre_1_0_producer_gives_a_legacy_capsule(rec):
    x = DlpackArray(4, legacy_only=True)
    dag = cg.Dag(backend=rec)
    dag.add_memset(x, np.float32(1))
    assert x.calls == [dict(stream=-1, max_version=None)], "asked again without max_version"
    del dag
    gc.collect()
    assert x.deleted == 1


def test_managed_memory_is_accepted(rec):
    dag = cg.Dag(backend=rec)
    dag.add_memset(DlpackArray(4, device=(13, 0)), np.float32(0))
    assert len(dag) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(strides=(2,)), "not C-contiguous"),
        (dict(shape=(2, 3), strides=(1, 2)), "not C-contiguous"),
        (dict(dtype=(4, 16, 1)), "bfloat16"),
        (dict(dtype=(2, 32, 4)), "vector dtypes"),
        (dict(dtype=(2, 12, 1)), "unsupported DLPack dtype"),
        (dict(dtype=(7, 32, 1)), "unsupported DLPack dtype"),
        (dict(ptr=0), "null"),
        (dict(byte_offset=2), "0x7f000002 is not aligned to the 4-byte elements of float32"),
        (dict(version=(2, 0)), "DLPack 2.0 is not supported"),
    ],
)
def test_a_refused_tensor_goes_back_to_its_producer(rec, kwargs, message):
    x = DlpackArray(kwargs.pop("shape", 4), **kwargs)
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match=message):
        dag.add_memset(x, np.uint8(0))
    gc.collect()
    assert x.deleted == 1, "the capsule, not renamed, deleted it"
    assert len(dag) == 0


def test_an_aligned_byte_offset_is_accepted(rec):
    dag = cg.Dag(backend=rec)
    dag.add_memset(DlpackArray(4, byte_offset=64), np.float32(0))
    assert len(dag) == 1


def test_c_contiguous_strides_and_unit_dimensions_are_accepted(rec):
    dag = cg.Dag(backend=rec)
    dag.add_memset(DlpackArray((2, 3), strides=(3, 1)), np.float32(0))
    dag.add_memset(DlpackArray((3, 1), strides=(1, 100)), np.float32(0))
    dag.add_memset(DlpackArray(()), np.float32(0))  # 0-d: one element
    assert len(dag) == 3


def test_a_read_only_tensor_is_refused_as_a_destination(rec):
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="memset destination: the array is read-only"):
        dag.add_memset(DlpackArray(4, readonly=True), np.float32(0))
    writes = rec.kernel("scale", signature="float* x, float a, int n")
    with pytest.raises(cg.ValidationError, match="read-only .* not a pointer to const"):
        dag.add_kernel(writes, 1, 4, [DlpackArray(4, readonly=True), 2.0, 4])
    reads = rec.kernel("sum", signature="const float* x, float* out")
    dag.add_kernel(reads, 1, 4, [DlpackArray(4, readonly=True), DlpackArray(1)])
    assert len(dag) == 1


def test_the_dtype_is_checked_against_the_kernel(rec):
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="points to float32 but the array holds float64"):
        dag.add_kernel(k, 1, 1, [DlpackArray(4, dtype=(2, 64, 1)), 1.0, 4])


def test_host_dlpack_arrays_are_not_taken_as_device_memory(rec):
    """A NumPy array has ``__dlpack__`` too, on the CPU: it stays pageable host memory."""
    cpu = DlpackArray(4, device=(1, 0))
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="expected a DeviceBuffer"):
        dag.add_memset(cpu, np.float32(0))
    assert cpu.calls == [], "never asked for a capsule"
    with pytest.raises(cg.ValidationError, match="pageable host memory"):
        dag.add_copy(rec.host_buffer(4), np.zeros(4, np.float32))


def test_a_producer_returning_something_else_is_refused(rec):
    class Odd:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kwargs):
            return "not a capsule"

    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="did not return an unused DLPack capsule"):
        dag.add_memset(Odd(), np.float32(0))


def test_a_producer_error_propagates(rec):
    class Failing:
        def __dlpack_device__(self):
            return (2, 0)

        def __dlpack__(self, **kwargs):
            raise BufferError("cannot export a view")

    dag = cg.Dag(backend=rec)
    with pytest.raises(BufferError, match="cannot export a view"):
        dag.add_memset(Failing(), np.float32(0))
