"""Host-only tests (no GPU) of the later node kinds: event record / wait nodes, programmatic
edges and launch attributes, conditional nodes, graph memory, device-updatable kernel nodes.
What lowering records on a RecordingBackend, DOT, validation errors naming the node, and
keep-alive of events and conditional bodies."""

import gc
import weakref

import numpy as np
import pytest

import cudagraph as cg


def step_kernel(rec):
    return rec.kernel("step", signature="float* x")


def set_kernel(rec):
    """(cudaGraphConditionalHandle h, float* x): the handle's type is not one the signature
    parser knows, so sizes are given."""
    return rec.kernel("set", param_sizes=[8, 8])


# Events


def test_event_nodes_lower_to_record_and_wait_calls(rec):
    done, ready = rec.event(), rec.event()
    dag = cg.Dag()
    w = dag.add_event_wait(ready, name="wait input")
    k = dag.add_kernel(step_kernel(rec), 1, 256, [rec.device_buffer(256)])
    r = dag.add_event_record(done, name="signal")
    dag.chain([w, k, r])
    dag.lower(rec)
    calls = rec.calls()
    assert [(c["function"], c["kind"], c["name"]) for c in (calls[0], calls[2])] == [
        ("cudaGraphAddNode", "event_wait", "wait input"),
        ("cudaGraphAddNode", "event_record", "signal"),
    ]
    assert calls[2]["deps"] == (1,)
    # Two placeholder events, two different handles.
    assert calls[0]["params"] != calls[2]["params"]
    dot = dag.to_dot()
    assert "record event" in dot and "wait for event" in dot


def test_a_node_keeps_its_event_alive_without_the_python_object(rec):
    dag = cg.Dag()
    ev = rec.event()
    handle = repr(ev).split("raw: ")[1].split(",")[0]
    dag.add_event_record(ev, name="rec")
    del ev
    gc.collect()
    dag.lower(rec)
    assert f"event={handle}" in rec.calls()[0]["params"]


def test_dag_set_event_replaces_the_event_and_refuses_other_nodes(rec):
    dag = cg.Dag()
    a, b = rec.event(), rec.event()
    n = dag.add_event_wait(a)
    dag.set_event(n, b)
    dag.lower(rec)
    b_handle = repr(b).split("raw: ")[1].split(",")[0]
    assert f"event={b_handle}" in rec.calls()[0]["params"]
    e = dag.add_empty(name="not an event")
    with pytest.raises(cg.ValidationError, match="not an event"):
        dag.set_event(e, a)


def test_placeholder_events_cannot_be_used_on_a_gpu(rec):
    ev = rec.event()
    with pytest.raises(cg.ValidationError):
        ev.synchronize()
    with pytest.raises(cg.ValidationError):
        ev.query()
    with pytest.raises(cg.ValidationError):
        ev.elapsed_ms(rec.event())


def test_placeholder_events_are_not_recorded_on_any_stream(rec):
    class TorchLikeStream:
        cuda_stream = 0x1234
        device_index = 0

    TorchLikeStream.__module__ = "torch.cuda.streams"

    ev = rec.event()
    with pytest.raises(cg.ValidationError, match="placeholder"):
        ev.record(TorchLikeStream())
    with pytest.raises(cg.ValidationError, match="plain int is not taken as a stream"):
        ev.record(0x1234)
    with pytest.raises(cg.ValidationError, match="a str is not a stream"):
        ev.record("stream")


def test_event_without_a_gpu_says_so():
    if cg.gpu_available():
        pytest.skip("a GPU is there")
    with pytest.raises(cg.NoGpuError):
        cg.Event()


def test_event_calls_are_refused_inside_host_callables(rec):
    ev = rec.event()
    err = cg._cudagraph._run_as_host_node(ev.synchronize)
    assert isinstance(err, cg.HostCallbackError)
    assert isinstance(err.__cause__, cg.ValidationError)
    assert "inside a host callable" in str(err.__cause__)


# Programmatic edges and launch attributes


def test_programmatic_edge_lowers_with_its_port(rec):
    x = rec.device_buffer(256)
    dag = cg.Dag()
    a = dag.add_kernel(step_kernel(rec), 1, 256, [x], name="producer")
    b = dag.add_kernel(step_kernel(rec), 1, 256, [x], name="consumer")
    c = dag.add_kernel(step_kernel(rec), 1, 256, [x], name="third")
    dag.add_programmatic_dependency(a, b)
    dag.add_programmatic_dependency(b, c, port="launch_completion")
    assert dag.edge_count == 2
    dag.lower(rec)
    calls = rec.calls()
    assert calls[1]["function"] == "cudaGraphAddNode"
    assert calls[1]["params"].endswith("edge(from_port=1 to_port=0 type=1)")
    assert calls[2]["params"].endswith("edge(from_port=2 to_port=0 type=1)")
    dot = dag.to_dot()
    assert 'label="programmatic"' in dot and "launch completion" in dot


def test_programmatic_edge_needs_two_kernels_and_a_known_port(rec):
    x = rec.device_buffer(256)
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 1, 256, [x], name="k")
    m = dag.add_memset(x, np.float32(0), name="zero")
    with pytest.raises(cg.ValidationError, match=r"`k` -> `zero`.*two kernel nodes"):
        dag.add_programmatic_dependency(k, m)
    k2 = dag.add_kernel(step_kernel(rec), 1, 256, [x])
    with pytest.raises(cg.ValidationError, match="launch_completion"):
        dag.add_programmatic_dependency(k, k2, port="eventually")
    assert dag.edge_count == 0


def test_launch_attributes_are_recorded_and_drawn(rec):
    x = rec.device_buffer(1024)
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 4, 256, [x], name="k")
    dag.set_launch_attributes(
        k,
        priority=-1,
        cluster_dim=(2,),
        cooperative=True,
        shared_mem_carveout=50,
        access_window=x,
        hit_ratio=0.5,
        mem_sync_domain="remote",
    )
    dag.lower(rec)
    p = rec.calls()[0]["params"]
    for want in (
        "priority=-1",
        "cluster=(2,1,1)",
        "cooperative",
        ":0.5:persisting:streaming",
        "sync_domain=remote",
    ):
        assert want in p, (want, p)
    dot = dag.to_dot()
    assert "cluster (2,1,1)" in dot and "sync domain remote" in dot
    # Set again: the attributes not given are unset.
    dag.set_launch_attributes(k, priority=3)
    rec.clear()
    dag.lower(rec)
    p = rec.calls()[0]["params"]
    assert "priority=3" in p and "cluster" not in p and "cooperative" not in p


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(cluster_dim=3), "does not divide grid.x = 4"),
        (dict(cluster_dim=(4, 4)), "does not divide grid.y = 1"),
        (dict(cluster_dim=(0,)), "zero dimension"),
        (dict(shared_mem_carveout=101), "over 100%"),
    ],
)
def test_launch_attributes_are_checked_naming_the_node(rec, kwargs, match):
    x = rec.device_buffer(1024)
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 4, 256, [x], name="attributed")
    with pytest.raises(cg.ValidationError, match=match) as e:
        dag.set_launch_attributes(k, **kwargs)
    assert "`attributed`" in str(e.value)


def test_launch_attribute_names_are_checked(rec):
    x = rec.device_buffer(1024)
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 4, 256, [x])
    with pytest.raises(cg.ValidationError, match="mem_sync_domain"):
        dag.set_launch_attributes(k, mem_sync_domain="far")
    dag.set_launch_attributes(k, cluster_dim=(4, 1, 1), priority=0)


def test_launch_attributes_refuse_a_bad_hit_ratio_and_property(rec):
    x = rec.device_buffer(1024)
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 4, 256, [x], name="k")
    with pytest.raises(cg.ValidationError, match="between 0 and 1"):
        dag.set_launch_attributes(k, access_window=x, hit_ratio=2.0)
    with pytest.raises(cg.ValidationError, match="persisting"):
        dag.set_launch_attributes(k, access_window=x, miss="sticky")


def test_launch_attributes_only_on_kernel_nodes(rec):
    dag = cg.Dag()
    e = dag.add_empty(name="nothing")
    with pytest.raises(cg.ValidationError, match="nothing"):
        dag.set_launch_attributes(e, priority=1)


# Conditional nodes


def test_conditional_handles_and_nodes_lower_with_their_bodies(rec):
    x = rec.device_buffer(256)
    dag = cg.Dag()
    h = dag.conditional_handle(default=1)
    assert (h.default, h.index) == (1, 0)
    body = cg.Dag()
    body.add_kernel(set_kernel(rec), 1, 1, [h, x], name="decide")
    i = dag.add_if(h, body, name="maybe")
    h2 = dag.conditional_handle()
    dag.add_if_else(h2, body, cg.Dag(), name="either")
    h3 = dag.conditional_handle()
    loop_body = cg.Dag()
    loop_body.add_kernel(set_kernel(rec), 1, 1, [h3, x], name="count down")
    dag.add_while(h3, loop_body, name="loop")
    h4 = dag.conditional_handle(2)
    dag.add_switch(h4, [cg.Dag(), cg.Dag(), cg.Dag()], name="pick")
    dag.lower(rec)
    calls = rec.calls()
    creates = [c for c in calls if c["function"] == "cudaGraphConditionalHandleCreate"]
    assert [c["params"].split()[0] for c in creates] == [
        "default=1",
        "default=0",
        "default=0",
        "default=2",
    ]
    conds = {c["name"]: c["params"] for c in calls if c["kind"] == "conditional"}
    assert conds["maybe"].startswith("type=IF ") and "`decide`" in conds["maybe"]
    assert conds["either"].startswith("type=IF/ELSE ") and "size=2" in conds["either"]
    assert conds["loop"].startswith("type=WHILE ") and "`count down`" in conds["loop"]
    assert conds["pick"].startswith("type=SWITCH ") and "size=3" in conds["pick"]
    dot = dag.to_dot()
    assert "IF handle #0 (default 1)" in dot and "SWITCH handle #3" in dot
    assert "case 2: case condition == 2" in dot
    assert i.index == 0


def test_conditional_errors_name_the_node(rec):
    x = rec.device_buffer(256)
    dag = cg.Dag()
    h = dag.conditional_handle()
    with pytest.raises(cg.ValidationError, match="another DAG"):
        cg.Dag().add_if(h, cg.Dag())
    with pytest.raises(cg.ValidationError, match="at least one case"):
        dag.add_switch(h, [])
    stray = cg.Dag()
    stray.add_kernel(set_kernel(rec), 1, 1, [h, x], name="stray")
    with pytest.raises(cg.ValidationError, match=r"`stray`.*another DAG"):
        stray.lower(rec)


def test_a_conditional_handle_is_passed_by_value(rec):
    dag = cg.Dag()
    h = dag.conditional_handle()
    k = rec.kernel("p", signature="float* p")
    with pytest.raises(cg.ValidationError, match="Conditional given for the pointer parameter"):
        dag.add_kernel(k, 1, 1, [h])


@pytest.mark.parametrize("kind", ["if", "if_else", "while", "switch"])
def test_a_conditional_node_keeps_its_bodies_alive(rec, fake, kind):
    x = fake(256)
    ref = weakref.ref(x)
    dag = cg.Dag()
    h = dag.conditional_handle()
    body = cg.Dag(backend=rec)
    body.add_kernel(set_kernel(rec), 1, 1, [h, x], name="decide")
    if kind == "if":
        dag.add_if(h, body)
    elif kind == "if_else":
        dag.add_if_else(h, cg.Dag(), body)
    elif kind == "while":
        dag.add_while(h, body)
    else:
        dag.add_switch(h, [cg.Dag(), body])
    del body, x
    gc.collect()
    assert ref() is not None, "the node's copy of the body holds the array"
    dag.lower(rec)
    assert "`decide`" in rec.calls()[-1]["params"]
    del dag
    gc.collect()
    assert ref() is None, "released with the DAG"


def test_a_conditional_body_holds_only_what_cuda_allows(rec):
    dag = cg.Dag()
    h = dag.conditional_handle()
    body = cg.Dag()
    body.add_host(lambda: None, name="tick")
    dag.add_while(h, body, name="loop")
    with pytest.raises(cg.ValidationError, match=r"`loop/body/tick`: is a host node"):
        dag.lower(rec)


def test_the_include_constants_are_exported():
    assert cg.CONDITIONAL_INCLUDE.startswith("#include")
    assert cg.DEVICE_UPDATE_INCLUDE.startswith("#include")


# Graph memory


def test_graph_allocation_lowers_with_its_users_and_free(rec):
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag()
    a, buf = dag.add_alloc(1024, "float32", name="scratch")
    assert (buf.shape, buf.dtype, buf.nbytes, buf.index) == ((1024,), "<f4", 4096, 0)
    m = dag.add_graph_memset(buf, 1.0, name="ones")
    u = dag.add_kernel(k, 4, 256, [buf, 2.0, 1024], name="use")
    f = dag.add_free(buf, name="release")
    dag.chain([a, m, u, f])
    dag.lower(rec)
    calls = rec.calls()
    assert [c["kind"] for c in calls] == ["mem_alloc", "memset", "kernel", "mem_free"]
    assert "bytes=4096" in calls[0]["params"]
    dptr = calls[0]["params"].split("dptr=")[1]
    # The address CUDA gives the allocation is written into its users.
    assert f"dst={dptr}" in calls[1]["params"] and "value=0x3f800000" in calls[1]["params"]
    assert calls[3]["params"] == f"dptr={dptr}"
    # ... and into the kernel's argument (its bytes in memory order).
    assert int(dptr, 16).to_bytes(8, "little").hex() in calls[2]["params"]
    dot = dag.to_dot()
    assert "graph buffer #0: 1024 × f32" in dot and "live until release" in dot


def test_graph_memory_errors_name_the_node(rec):
    dag = cg.Dag()
    a, buf = dag.add_alloc((4, 4), "int32")
    with pytest.raises(cg.ValidationError, match=r"`alloc#1`.*0 bytes"):
        dag.add_alloc(0)
    dag.add_kernel(rec.kernel("i", signature="int* x"), 1, 1, [buf], name="unordered")
    with pytest.raises(cg.ValidationError, match=r"`unordered`.*not ordered after its allocation"):
        dag.lower(rec)
    with pytest.raises(cg.ValidationError, match="another DAG"):
        cg.Dag().add_free(buf)
    dag.add_free(buf, name="once")
    with pytest.raises(cg.ValidationError, match="`once` frees already"):
        dag.add_free(buf)
    with pytest.raises(cg.ValidationError, match="points to float32 but the array holds int32"):
        dag.add_kernel(rec.kernel("f", signature="float* x"), 1, 1, [buf])
    with pytest.raises(cg.ValidationError, match="1, 2 or 4-byte"):
        dag.add_graph_memset(buf, np.float64(1))


def test_graph_buffers_of_every_element_size(rec):
    dag = cg.Dag()
    sizes = [("uint8", 1), ("float16", 2), ("int32", 4), ("float64", 8), ("complex128", 16)]
    for dtype, size in sizes:
        _, b = dag.add_alloc((3, 2), dtype)
        assert b.nbytes == 6 * size and b.shape == (3, 2)
        assert b.dtype == np.dtype(dtype).str


# Device-updatable kernel nodes


def test_device_node_is_an_argument_of_the_updating_kernel(rec):
    k = rec.kernel("scale", signature="float* x, float a, int n")
    dag = cg.Dag()
    target = dag.add_kernel(k, 4, 256, [rec.device_buffer(1024), 2.0, 1024], name="target")
    dn = dag.device_node(target)
    assert dn.index == 0 and dag.device_node(target).index == 0
    upd = dag.add_kernel(rec.kernel("upd", param_sizes=[8]), 1, 1, [dn], name="updater")
    dag.chain([upd, target])
    dag.lower(rec)
    t = rec.transcript()
    assert "device_updatable=#0" in t
    # The updater, added before the node's handle exists, gets it afterwards.
    assert rec.calls()[-1]["function"] == "cudaGraphKernelNodeSetParams"
    assert rec.calls()[-1]["name"] == "updater"


def test_device_node_errors_name_the_node(rec):
    dag = cg.Dag()
    e = dag.add_empty(name="idle")
    with pytest.raises(cg.ValidationError, match=r"`idle`.*not a kernel node"):
        dag.device_node(e)
    k = rec.kernel("p", signature="float* p")
    t = dag.add_kernel(k, 1, 1, [rec.device_buffer(4)])
    dn = dag.device_node(t)
    with pytest.raises(cg.ValidationError, match="DeviceNode given for the pointer parameter"):
        dag.add_kernel(k, 1, 1, [dn])
    other = cg.Dag()
    other.add_kernel(rec.kernel("upd", param_sizes=[8]), 1, 1, [dn], name="stray")
    with pytest.raises(cg.ValidationError, match="`stray`"):
        other.lower(rec)


def test_instantiate_takes_its_flags_as_keywords():
    import inspect

    sig = inspect.signature(cg.Dag.instantiate)
    for flag in ("auto_free_on_launch", "use_node_priority"):
        assert sig.parameters[flag].kind is inspect.Parameter.KEYWORD_ONLY
        assert sig.parameters[flag].default is False


# Captured nodes


class Work:
    """A capture callable that can be weakly referenced; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, stream):
        self.calls += 1


def test_captured_node_lowers_as_a_capture_without_calling_the_callable(rec):
    x = rec.device_buffer(256, "float32")
    work = Work()
    dag = cg.Dag()
    k = dag.add_kernel(step_kernel(rec), 1, 256, [x])
    c = dag.add_captured(work, [x], what="library call", name="lib")
    dag.add_dependency(k, c)
    dag.lower(rec)
    call = rec.calls()[1]
    assert (call["function"], call["kind"], call["name"]) == (
        "cudaStreamBeginCaptureToGraph",
        "captured",
        "lib",
    )
    assert call["params"].startswith("work=`library call` uses=[0x") and "+1024]" in call["params"]
    assert work.calls == 0, "a RecordingBackend records the capture, it does not run the work"
    assert "captured: library call" in dag.to_dot()


def test_captured_work_is_named_after_the_callable_by_default(rec):
    def fill_with_cupy(stream):
        pass

    dag = cg.Dag()
    dag.add_captured(fill_with_cupy)
    dag.lower(rec)
    assert "work=`test_captured_work_is_named_after_the_callable_by_default.<locals>." \
        "fill_with_cupy` uses=[]" in rec.calls()[0]["params"]


def test_a_captured_node_keeps_its_callable_and_buffers_alive(rec, fake):
    x = fake(64)
    work = Work()
    refs = weakref.ref(x), weakref.ref(work)
    dag = cg.Dag(backend=rec)
    dag.add_captured(work, [x])
    child = cg.Dag()
    child.add_child(dag)
    del x, work, dag
    gc.collect()
    assert all(r() is not None for r in refs), "the child copy holds them"
    del child
    gc.collect()
    assert all(r() is None for r in refs)


def test_add_captured_checks_its_arguments(rec):
    dag = cg.Dag()
    with pytest.raises(TypeError, match="callable"):
        dag.add_captured(42)
    with pytest.raises(cg.ValidationError, match="captured work's buffer 0: pageable host memory"):
        dag.add_captured(Work(), [np.zeros(4, np.float32)])
    assert len(dag) == 0


def _as_from(module, name, **attrs):
    """An object whose type claims to be `module.name`, with `attrs`."""
    ty = type(name, (), attrs)
    ty.__module__ = module
    return ty()


@pytest.mark.parametrize(
    "obj, message",
    [
        (_as_from("cupy.cuda.stream", "ExternalStream", ptr=0x1234), "does not own"),
        (_as_from("torch.cuda.streams", "ExternalStream", cuda_stream=0x1234), "does not own"),
        (_as_from("cupy.cuda.stream", "Event", ptr=0x1234), "not a stream"),
        (_as_from("cupy.cuda.memory", "MemoryPointer", ptr=0x1234), "not a stream"),
        (_as_from("mylib", "Stream", ptr=0x1234), "a mylib.Stream is not a stream"),
        (_as_from("mylib", "Stream", cuda_stream=0x1234), "not a stream"),
    ],
)
def test_only_objects_that_own_their_stream_are_taken(rec, obj, message):
    """A handle whose owner nothing keeps alive (ExternalStream), or an attribute of an object
    that is no stream (a CuPy event's or memory pointer's .ptr), is refused before CUDA sees it."""
    with pytest.raises(cg.ValidationError, match=message):
        rec.event().record(obj)
