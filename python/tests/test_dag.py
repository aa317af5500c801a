"""Host-only tests (no GPU): building DAGs, validation errors, DOT, lowering on a
RecordingBackend, kernel arguments."""

import re

import numpy as np
import pytest

import cudagraph as cg


def scale_kernel(rec):
    return rec.kernel("scale", signature="float* x, float a, int n")


def test_the_quickstart_dag_lowers_to_three_calls_in_order(rec):
    x = rec.device_buffer(1024, "float32")
    h = rec.host_buffer(1024, "float32")
    dag = cg.Dag()
    up = dag.add_copy(x, h)
    k = dag.add_kernel(scale_kernel(rec), 4, 256, [x, np.float32(2.0), 1024], name="scale x")
    down = dag.add_copy(h, x)
    dag.chain([up, k, down])
    assert len(dag) == 3 and dag.edge_count == 2
    assert dag.lower(rec) == 3
    calls = rec.calls()
    assert [c["function"] for c in calls] == [
        "cudaGraphAddMemcpyNode1D",
        "cudaGraphAddKernelNode",
        "cudaGraphAddMemcpyNode1D",
    ]
    assert calls[1]["name"] == "scale x"
    assert calls[1]["deps"] == (0,) and calls[2]["deps"] == (1,)
    assert "kind=HostToDevice" in calls[0]["params"]
    assert "kind=DeviceToHost" in calls[2]["params"]
    assert "grid=(4,1,1) block=(256,1,1)" in calls[1]["params"]
    # The float 2.0 packed as f32 (0x40000000), n = 1024 as int32 (0x400).
    assert "00000040" in calls[1]["params"] and "00040000" in calls[1]["params"]
    assert "scale x" in rec.transcript()


def test_dot_has_a_line_per_node_and_per_edge(rec):
    x = rec.device_buffer(16)
    dag = cg.Dag()
    a = dag.add_memset(x, np.float32(0.0), name="zero")
    b = dag.add_kernel(scale_kernel(rec), 1, 16, [x, 3.0, 16], name="triple")
    c = dag.add_empty(name="join")
    dag.chain([a, b, c])
    dot = dag.to_dot()
    assert dot.startswith("digraph")
    assert len(re.findall(r"^\s*n\d+ \[label=", dot, re.M)) == 3
    assert len(re.findall(r"^\s*n\d+ -> n\d+", dot, re.M)) == 2
    for name in ("zero", "triple", "join"):
        assert name in dot


def test_a_cycle_is_refused_naming_the_nodes(rec):
    dag = cg.Dag()
    a, b, c = (dag.add_empty(name=n) for n in ("first", "second", "third"))
    dag.chain([a, b, c])
    with pytest.raises(cg.ValidationError, match="cycle") as e:
        dag.add_dependency(c, a)
    assert "first" in str(e.value) and "third" in str(e.value)
    assert dag.edge_count == 2


def test_wrong_argument_count_names_the_node(rec):
    x = rec.device_buffer(16)
    dag = cg.Dag()
    dag.add_empty()
    with pytest.raises(cg.ValidationError, match=r"node `kernel#1`.*takes 3 arguments but 2"):
        dag.add_kernel(scale_kernel(rec), 1, 16, [x, np.float32(1)])
    assert len(dag) == 1


def test_a_named_node_is_named_in_lowering_errors(rec):
    k = rec.kernel("big", [8])
    x = rec.device_buffer(16)
    dag = cg.Dag()
    dag.add_kernel(k, 1, 4096, [x], name="too wide")  # more threads than a block may have
    with pytest.raises(cg.ValidationError, match="too wide"):
        dag.lower(rec)


def test_errors_are_one_hierarchy():
    for cls in (
        cg.ValidationError,
        cg.CudaError,
        cg.NoGpuError,
        cg.HostCallbackError,
        cg.CompileError,
        cg.LibraryError,
        cg.UpdateRefusedError,
    ):
        assert issubclass(cls, cg.CudaGraphError)
    assert issubclass(cg.UpdateRefusedError, cg.ValidationError)
    assert issubclass(cg.CudaGraphError, Exception)


def test_nodes_of_another_dag_are_refused():
    a, b = cg.Dag(), cg.Dag()
    n = a.add_empty()
    m = b.add_empty()
    with pytest.raises(cg.ValidationError, match="another DAG"):
        a.add_dependency(n, m)


def test_set_name_and_name_of(rec):
    dag = cg.Dag()
    n = dag.add_empty()
    assert dag.name_of(n) == "empty#0"
    assert dag.set_name(n, "start") == n
    assert dag.name_of(n) == "start"
    assert "start" in dag.to_dot()


def test_child_dag_lowers_as_a_child_graph(rec):
    child = cg.Dag()
    child.add_memset(rec.device_buffer(8, "uint32"), 7)
    dag = cg.Dag()
    c = dag.add_child(child, name="inner")
    dag.chain([dag.add_empty(), c])
    dag.lower(rec)
    assert any(call["kind"] == "graph" and call["name"] == "inner" for call in rec.calls())


def test_host_node_lowers_as_a_host_call(rec):
    dag = cg.Dag()
    dag.add_host(lambda: None, name="tick")
    dag.lower(rec)
    (call,) = rec.calls()
    assert call["kind"] == "host" and call["name"] == "tick"


def test_add_host_needs_a_callable():
    with pytest.raises(TypeError):
        cg.Dag().add_host(42)


def test_topological_order_respects_edges():
    dag = cg.Dag()
    a, b, c = dag.add_empty(), dag.add_empty(), dag.add_empty()
    dag.add_dependency(c, a)
    dag.add_dependency(a, b)
    order = [n.index for n in dag.topological_order()]
    assert order.index(c.index) < order.index(a.index) < order.index(b.index)


# --- kernel arguments (CuPy RawKernel's convention) ---


def test_plain_numbers_need_known_parameter_types(rec):
    k = rec.kernel("k", [8, 4, 4])  # sizes only: types unknown
    x = rec.device_buffer(4)
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="plain Python float has no C type"):
        dag.add_kernel(k, 1, 1, [x, 2.0, np.int32(1)])
    with pytest.raises(cg.ValidationError, match="plain Python int has no C type"):
        dag.add_kernel(k, 1, 1, [x, np.float32(2.0), 1])
    dag.add_kernel(k, 1, 1, [x, np.float32(2.0), np.int32(1)])
    assert len(dag) == 1


def test_numpy_scalars_are_packed_as_their_type(rec):
    k = rec.kernel("k", [8, 8])
    dag = cg.Dag()
    dag.add_kernel(k, 1, 1, [np.float64(1.0), np.int64(-1)])
    dag.lower(rec)
    params = rec.calls()[0]["params"]
    assert "000000000000f03f" in params  # 1.0 as f64, little-endian
    assert "ffffffffffffffff" in params


def test_numpy_scalar_of_the_wrong_type_is_refused_where_types_are_known(rec):
    x = rec.device_buffer(4)
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="numpy.int32 given for parameter `float a`"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [x, np.int32(2), 4])
    with pytest.raises(cg.ValidationError, match="numpy.float64 given"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [x, np.float64(2), 4])


def test_plain_int_out_of_range_or_float_for_int_is_refused(rec):
    x = rec.device_buffer(4)
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="does not fit in int32"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [x, 1.0, 2**40])
    with pytest.raises(cg.ValidationError, match="a float given for a parameter of type int32"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [x, 1.0, 4.5])


def test_array_dtype_is_checked_against_the_pointer_type(rec):
    dag = cg.Dag()
    ints = rec.device_buffer(4, "int32")
    with pytest.raises(cg.ValidationError, match="points to float32 but the array holds int32"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [ints, 1.0, 4])


def test_scalar_for_pointer_and_array_for_value_are_refused(rec):
    x = rec.device_buffer(4)
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="pointer parameter"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [np.float32(1), 1.0, 4])
    with pytest.raises(cg.ValidationError, match="value parameter"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [x, x, 4])


def test_host_numpy_arrays_are_not_kernel_arguments(rec):
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="host array cannot be a kernel argument"):
        dag.add_kernel(scale_kernel(rec), 1, 1, [np.zeros(4, np.float32), 1.0, 4])


def test_kernel_signature_must_match_parameter_sizes(rec):
    with pytest.raises(cg.ValidationError, match="does not match its parameters' sizes"):
        rec.kernel("k", [8, 4], signature="double a, double b")
    k = rec.kernel("k", signature="double a, unsigned long long b, const float* __restrict__ c")
    assert k.param_sizes == [8, 8, 8]
    assert k.param_types == ["float64", "uint64", "float32*"]


def test_grid_and_block_take_tuples(rec):
    k = rec.kernel("k", [4])
    dag = cg.Dag()
    dag.add_kernel(k, (2, 3), (8, 4, 2), [np.int32(0)], shared_mem=128)
    dag.lower(rec)
    p = rec.calls()[0]["params"]
    assert "grid=(2,3,1) block=(8,4,2) smem=128" in p
    with pytest.raises(cg.ValidationError, match="1 to 3 dimensions"):
        dag.add_kernel(k, (1, 1, 1, 1), 1, [np.int32(0)])


# --- copies and memsets ---


def test_copy_of_different_sizes_is_refused_naming_the_node(rec):
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="memcpy#0"):
        dag.add_copy(rec.device_buffer(16), rec.host_buffer(8))


def test_pageable_numpy_arrays_are_refused_as_copy_ends(rec):
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="pinned cudagraph.HostBuffer"):
        dag.add_copy(rec.device_buffer(4), np.zeros(4, np.float32))


def test_memset_values(rec):
    dag = cg.Dag()
    dag.add_memset(rec.device_buffer(8, "float32"), 1.5)
    dag.add_memset(rec.device_buffer(8, "uint16"), 65535)
    dag.add_memset(rec.device_buffer(8, "uint8"), np.uint8(3))
    dag.lower(rec)
    params = [c["params"] for c in rec.calls()]
    assert "value=0x3fc00000 element_size=4 width=8" in params[0]  # 1.5 as float32 bits
    assert "value=0xffff element_size=2 width=8" in params[1]
    assert "value=0x3 element_size=1 width=8" in params[2]
    with pytest.raises(cg.ValidationError, match="does not fit in uint16"):
        dag.add_memset(rec.device_buffer(8, "uint16"), 70000)
    with pytest.raises(cg.ValidationError, match="1, 2 or 4-byte"):
        dag.add_memset(rec.device_buffer(8, "float64"), 1.0)
    with pytest.raises(cg.ValidationError, match="1, 2 or 4-byte"):
        dag.add_memset(rec.device_buffer(8, "float32"), np.float64(1.0))


def test_buffers_report_shape_and_dtype(rec):
    b = rec.device_buffer((4, 8), np.float64)
    assert b.shape == (4, 8) and b.dtype == "<f8" and b.nbytes == 256 and b.size == 32
    assert b.device is None
    assert not hasattr(b, "__cuda_array_interface__")  # placeholders have no memory
    with pytest.raises(AttributeError):
        b.__dlpack__()
    with pytest.raises(AttributeError):
        b.__dlpack_device__()
    h = rec.host_buffer(3, "int16")
    assert h.shape == (3,) and h.dtype == "<i2" and h.nbytes == 6
    with pytest.raises(cg.ValidationError, match="unsupported dtype"):
        rec.device_buffer(4, "float128")
    with pytest.raises(cg.ValidationError, match="big-endian"):
        rec.device_buffer(4, ">f4")


def test_help_is_useful():
    doc = cg.Dag.__doc__
    assert "DAG" in doc and "instantiate" in doc
    assert "NumPy scalars" in cg.Dag.add_kernel.__doc__
    assert "HostCallbackError" in cg.Dag.add_host.__doc__
    for name in cg.__all__:
        obj = getattr(cg, name)
        if callable(obj):
            assert obj.__doc__, name


def test_memset_values_are_one_element_of_the_buffer_s_size(rec):
    dag = cg.Dag()
    dag.add_memset(rec.device_buffer(8, "float32"), np.array(2.0, np.float32))  # 0-d
    dag.add_memset(rec.device_buffer(8, "float32"), np.uint32(0x3F800000))  # same size
    with pytest.raises(cg.ValidationError, match="one element"):
        dag.add_memset(rec.device_buffer(8, "float32"), np.zeros(1, np.float32))
    with pytest.raises(cg.ValidationError, match="one element"):
        dag.add_memset(rec.device_buffer(8, "uint8"), np.zeros(4, np.uint8))
    with pytest.raises(cg.ValidationError, match="2-byte numpy.uint16 cannot fill float32"):
        dag.add_memset(rec.device_buffer(8, "float32"), np.uint16(1))

    class Impostor:
        dtype = np.dtype(np.float32)

        def tobytes(self):
            return b"\0\0\0\0"

    with pytest.raises(cg.ValidationError, match="one element"):
        dag.add_memset(rec.device_buffer(8, "float32"), Impostor())
    assert len(dag) == 2
