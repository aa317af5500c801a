"""Host tests of dependencies inferred from data access (``Dag.infer_dependencies``,
``Dag.races``) and the ``In``/``Out``/``InOut`` marks of kernel arguments, on a recording
backend."""

import numpy as np
import pytest

import cudagraph as cg


@pytest.fixture
def k(rec):
    return rec.kernel("k", signature="const float* x, float* y, int n")


@pytest.fixture
def w(rec):
    return rec.kernel("w", signature="float* y, int n")


def test_a_writer_then_a_reader_is_ordered_and_readers_stay_parallel(rec, k, w):
    x = rec.device_buffer(256, "float32")
    y = rec.device_buffer(256, "float32")
    z = rec.device_buffer(256, "float32")
    dag = cg.Dag(backend=rec)
    fill = dag.add_kernel(w, 1, 256, [cg.Out(x), 256], name="fill x")
    r1 = dag.add_kernel(k, 1, 256, [cg.In(x), cg.Out(y), 256], name="read x into y")
    r2 = dag.add_kernel(k, 1, 256, [cg.In(x), cg.Out(z), 256], name="read x into z")
    races = dag.races()
    assert {(dag.name_of(a), dag.name_of(b)) for a, b, _ in races} == {
        ("fill x", "read x into y"),
        ("fill x", "read x into z"),
    }, races
    assert all(h.startswith("RAW ") and h.endswith("[0..1024]") for _, _, h in races), races
    edges = dag.infer_dependencies()
    assert [(dag.name_of(a), dag.name_of(b)) for a, b, _ in edges] == [
        ("fill x", "read x into y"),
        ("fill x", "read x into z"),
    ], edges
    assert dag.races() == []
    assert dag.infer_dependencies() == [], "nothing new the second time"
    assert (edges[0][0], edges[0][1], edges[1][1]) == (fill, r1, r2)
    assert "style=dashed" in dag.to_dot() and "RAW" in dag.to_dot()


def test_unmarked_buffers_are_read_and_written(rec, w):
    x = rec.device_buffer(64, "float32")
    dag = cg.Dag(backend=rec)
    a = dag.add_kernel(w, 1, 64, [x, 64], name="a")
    b = dag.add_kernel(w, 1, 64, [x, 64], name="b")
    (edge,) = dag.infer_dependencies()
    assert (edge[0], edge[1]) == (a, b)
    # Both read and write all of x: the later one reads what the earlier one writes.
    assert edge[2].startswith("RAW ") and edge[2].endswith("[0..256]"), edge


def test_a_written_mark_on_a_const_parameter_and_marks_on_non_buffers_are_refused(rec, k):
    x = rec.device_buffer(16, "float32")
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="marked as written, but parameter `const float\\* x`"):
        dag.add_kernel(k, 1, 16, [cg.Out(x), x, 16])
    with pytest.raises(cg.ValidationError, match="In, Out and InOut mark a buffer argument"):
        dag.add_kernel(k, 1, 16, [x, x, cg.In(np.int32(16))])
    assert len(dag) == 0


def test_marks_take_foreign_arrays_and_show_what_they_wrap(rec, k, fake):
    a = fake(16)
    m = cg.InOut(a)
    assert m.array is a and repr(m).startswith("InOut(")
    dag = cg.Dag(backend=rec)
    dag.add_kernel(k, 1, 16, [cg.In(fake(16, ptr=0x7F00_1000)), m, 16])
    dag.lower(rec)
    assert len(rec.calls()) == 1


def test_host_nodes_touch_everything(rec, w):
    x = rec.device_buffer(16, "float32")
    dag = cg.Dag(backend=rec)
    kernel = dag.add_kernel(w, 1, 16, [cg.Out(x), 16], name="kernel")
    host = dag.add_host(lambda: None, name="host")
    (edge,) = dag.infer_dependencies()
    assert (edge[0], edge[1]) == (kernel, host)
    assert "everything (host node)" in edge[2]
