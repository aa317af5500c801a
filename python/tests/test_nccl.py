"""Host tests of collective (NCCL) nodes on placeholder communicators of two recording backends:
what lowering records, the checks that the ranks' DAGs fit together, dtypes, foreign operands.
The GPU test (one rank on one GPU) is in test_gpu.py."""

import gc
import weakref

import numpy as np
import pytest

import cudagraph as cg


@pytest.fixture
def two():
    recs = [cg.RecordingBackend(), cg.RecordingBackend()]
    return recs, cg.Communicators.recording(recs)


def ring(recs, comms, rank, dtype="float32"):
    """Rank `rank`'s DAG: all-reduce in place, all-gather, reduce-scatter, broadcast, exchange."""
    rec, comm = recs[rank], comms.comm(rank)
    x = rec.device_buffer(1024, dtype)
    gathered = rec.device_buffer(2048, dtype)
    half = rec.device_buffer(512, dtype)
    other = rec.device_buffer(512, dtype)
    dag = cg.Dag(backend=rec)
    nodes = [
        dag.add_all_reduce(comm, x, x, name="sum"),
        dag.add_all_gather(comm, x, gathered),
        dag.add_reduce_scatter(comm, x, half, op="max"),
        dag.add_broadcast(comm, gathered, gathered, root=1),
        dag.add_send_recv(comm, half, 1 - rank, other, 1 - rank),
    ]
    dag.chain(nodes)
    return dag


def test_communicators_and_comms(two):
    recs, comms = two
    assert len(comms) == 2
    c = comms.comm(1)
    assert (c.rank, c.ranks) == (1, 2)
    with pytest.raises(cg.CudaGraphError, match="rank 2"):
        comms.comm(2)


def test_collectives_lower_as_captured_nccl_calls(two):
    recs, comms = two
    dag = ring(recs, comms, 1)
    dag.lower(recs[1])
    t = recs[1].transcript()
    lines = t.splitlines()
    assert len(lines) == 5, t
    assert "`sum`" in lines[0] and "nccl all-reduce sum f32 x1024 in place rank=1/2" in lines[0], t
    assert "nccl all-gather f32 x1024 per rank rank=1/2" in lines[1], t
    assert "reduce-scatter max f32 x512 per rank" in lines[2], t
    assert "broadcast f32 x2048 from rank 1 in place" in lines[3], t
    assert "send f32 x512 to rank 0 + recv f32 x512 from rank 0" in lines[4], t
    assert "rank 1 of 2" in dag.to_dot()


def test_ranks_that_fit_together_pass_and_others_are_refused_naming_the_node(two):
    recs, comms = two
    d0, d1 = ring(recs, comms, 0), ring(recs, comms, 1)
    comms.check_ranks([d0, d1])
    with pytest.raises(cg.ValidationError, match="is rank 1's"):
        comms.check_ranks([d1, d0])
    with pytest.raises(cg.CudaGraphError, match="2 ranks, but 1 DAGs"):
        comms.check_ranks([d0])
    # Rank 1 all-reduces fewer elements than rank 0.
    short = cg.Dag(backend=recs[1])
    short.add_all_reduce(comms.comm(1), recs[1].device_buffer(32, "float32"),
                         recs[1].device_buffer(32, "float32"), name="short")
    only = cg.Dag(backend=recs[0])
    only.add_all_reduce(comms.comm(0), recs[0].device_buffer(64, "float32"),
                        recs[0].device_buffer(64, "float32"))
    with pytest.raises(cg.ValidationError, match="short.*does not match rank 0's"):
        comms.check_ranks([only, short])
    # A send with no receive.
    lone = cg.Dag(backend=recs[0])
    lone.add_send(comms.comm(0), recs[0].device_buffer(8, "int32"), 1)
    with pytest.raises(cg.ValidationError, match="no matching receive on rank 1"):
        comms.check_ranks([lone, cg.Dag(backend=recs[1])])


def test_recording_communicators_instantiate_nothing(two):
    recs, comms = two
    with pytest.raises(cg.CudaGraphError):
        comms.instantiate([ring(recs, comms, 0), ring(recs, comms, 1)])


@pytest.mark.parametrize(
    "dtype, shown",
    [("int8", "i8"), ("uint8", "u8"), ("int32", "i32"), ("uint32", "u32"), ("int64", "i64"),
     ("uint64", "u64"), ("float64", "f64")],
)
def test_each_nccl_dtype(two, dtype, shown):
    recs, comms = two
    dag = cg.Dag(backend=recs[0])
    b = recs[0].device_buffer(16, dtype)
    dag.add_all_reduce(comms.comm(0), b, b, op="min")
    dag.lower(recs[0])
    assert f"all-reduce min {shown} x16 in place" in recs[0].transcript()


def test_bad_collectives_are_validation_errors(two):
    recs, comms = two
    rec, comm = recs[0], comms.comm(0)
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="a collective of complex64"):
        b = rec.device_buffer(4, "complex64")
        dag.add_all_reduce(comm, b, b)
    with pytest.raises(cg.ValidationError, match="recv holds float64 but send holds float32"):
        dag.add_all_reduce(comm, rec.device_buffer(4, "float32"), rec.device_buffer(4, "float64"))
    with pytest.raises(cg.ValidationError, match="reduction `mean`"):
        b = rec.device_buffer(4, "float32")
        dag.add_all_reduce(comm, b, b, op="mean")
    # A buffer of the other rank's backend.
    with pytest.raises(cg.CudaGraphError):
        b = recs[1].device_buffer(4, "float32")
        dag.add_all_reduce(comm, b, b)
    assert len(dag) == 0


def test_foreign_operands_are_kept_alive(two, fake):
    recs, comms = two
    x = fake(64)
    ref = weakref.ref(x)
    dag = cg.Dag(backend=recs[0])
    dag.add_all_reduce(comms.comm(0), x, x)
    del x
    gc.collect()
    assert ref() is not None
    del dag
    gc.collect()
    assert ref() is None
    with pytest.raises(cg.ValidationError, match="buf: the array is read-only"):
        cg.Dag(backend=recs[0]).add_recv(comms.comm(0), fake(4, data=(0x7F00_0000, True)), 1)


def test_communicators_without_a_gpu_say_so():
    if cg.gpu_available():
        pytest.skip("a GPU is there")
    with pytest.raises(cg.NoGpuError):
        cg.Communicators([cg.Device(0)])
