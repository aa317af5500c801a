"""GPU tests of the node kinds beyond kernels, copies, memsets and FFTs: event record and wait
nodes (and events recorded on other libraries' streams), programmatic edges, launch
attributes, conditional nodes, graph memory, device-updatable kernel nodes and captured work,
against NumPy. Skipped with the reason without a GPU (failed under CUDAGRAPH_REQUIRE_GPU=1)."""

import numpy as np
import pytest

import cudagraph as cg
from test_gpu import BLOCK, GRID, N

pytestmark = pytest.mark.gpu

GRAPH_SOURCE = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
extern "C" __global__ void write_slot(unsigned int* out, unsigned int slot, unsigned int v) {
    out[slot] = v;
}
extern "C" __global__ void add_const(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
extern "C" __global__ void add_from(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}
extern "C" __global__ void set_cond(cudaGraphConditionalHandle h, const unsigned int* v) {
    cudaGraphSetConditional(h, *v);
}
// One WHILE iteration: halves x[0], counts it, goes on while x[0] is above the threshold.
extern "C" __global__ void halve(float* x, unsigned int* iters, float threshold,
                                 cudaGraphConditionalHandle h) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        x[0] *= 0.5f;
        iters[0] += 1;
        cudaGraphSetConditional(h, x[0] > threshold ? 1u : 0u);
    }
}
// A programmatic-edge chain step: reads the kernel before's output after the wait.
extern "C" __global__ void pdl_add(const float* in, float* out, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float add = a;
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
    if (i < n) out[i] = in[i] + add;
}
"""

#: About 0.1 s of GPU time on one thread: long enough that unordered work would overtake it.
SPIN = np.int64(200_000_000)


@pytest.fixture(scope="module")
def gmod(device):
    return cg.Module.from_source(cg.CONDITIONAL_INCLUDE + GRAPH_SOURCE, device)


def test_event_nodes_order_two_graphs_on_two_streams(device, gmod):
    out = cg.DeviceBuffer.from_numpy(np.zeros(2, np.uint32), device)
    e = cg.Event(device)
    a = cg.Dag()
    s = a.add_kernel(gmod.kernel("spin"), 1, 1, [SPIN])
    w = a.add_kernel(gmod.kernel("write_slot"), 1, 1, [out, 0, 7])
    r = a.add_event_record(e, name="written")
    a.chain([s, w, r])
    b = cg.Dag()
    wait = b.add_event_wait(e, name="wait for A")
    c = b.add_kernel(gmod.kernel("write_slot"), 1, 1, [out, 1, 5])
    b.add_dependency(wait, c)
    xa, xb = a.instantiate(device), b.instantiate(device)
    del e  # the graphs keep the event alive
    s1, s2 = cg.Stream(device), cg.Stream(device)
    start, end = cg.Event(device), cg.Event(device)
    start.record(s1)
    xa.launch(s1)
    xb.launch(s2)
    end.record(s2)
    end.synchronize()
    assert end.query()
    xa.synchronize()
    # B wrote after A's spin: the time from before A to after B covers it.
    assert start.elapsed_ms(end) > 10.0
    np.testing.assert_array_equal(out.to_numpy(), [7, 5])


def test_events_recorded_on_torch_and_cupy_streams(device, torch, cupy):
    x = torch.zeros(1 << 20, device="cuda")
    ts = torch.cuda.Stream()
    cs = cupy.cuda.Stream(non_blocking=True)
    start, mid, end = cg.Event(device), cg.Event(device), cg.Event(device)
    ts.wait_stream(torch.cuda.current_stream())  # x's zero fill, on the default stream
    start.record(ts)
    with torch.cuda.stream(ts):
        x.add_(1.0)
    mid.record(ts)
    end.record(cs)
    end.synchronize()
    mid.synchronize()
    assert mid.query() and start.query()
    assert start.elapsed_ms(mid) >= 0.0
    assert float(x[0]) == 1.0
    with pytest.raises(cg.ValidationError, match="plain int is not taken as a stream"):
        start.record(ts.cuda_stream)


def test_exec_set_event_records_the_new_event(device, gmod):
    e1, e2, start = cg.Event(device), cg.Event(device), cg.Event(device)
    dag = cg.Dag()
    r = dag.add_event_record(e1)
    x = dag.instantiate(device)
    s = cg.Stream(device)
    e2.record(s)
    gap = cg.Dag()
    gap.add_kernel(gmod.kernel("spin"), 1, 1, [np.int64(1_000_000)])
    gx = gap.instantiate(device)
    gx.launch(s)
    start.record(s)
    x.launch(s)
    s.synchronize()
    start.elapsed_ms(e1)  # e1 was recorded
    assert start.elapsed_ms(e2) < 0.0, "e2 was recorded only before start"
    x.set_event(r, e2)
    start.record(s)
    x.launch(s)
    s.synchronize()
    assert start.elapsed_ms(e2) >= 0.0, "the graph recorded e2 after start"
    empty = cg.Dag()
    n = empty.add_empty(name="no event")
    xe = empty.instantiate(device)
    with pytest.raises(cg.ValidationError, match="no event"):
        xe.set_event(n, e1)


@pytest.mark.parametrize("port", ["programmatic", "launch_completion"])
def test_programmatic_chain_computes_what_plain_edges_compute(device, gmod, port):
    n = 1 << 16
    data = (np.arange(n) % 1000).astype(np.float32)
    x = cg.DeviceBuffer.from_numpy(data, device)
    y = cg.DeviceBuffer(n, "float32", device)
    k = gmod.kernel("pdl_add")
    dag = cg.Dag()
    nodes = []
    for j in range(16):  # even: ends in x
        src, dst = (x, y) if j % 2 == 0 else (y, x)
        nodes.append(dag.add_kernel(k, n // 256, 256, [src, dst, float(j), n]))
    for a, b in zip(nodes, nodes[1:]):
        dag.add_programmatic_dependency(a, b, port=port)
    dag.set_launch_attributes(nodes[0], priority=0)
    exec = dag.instantiate(device, use_node_priority=True)
    for _ in range(3):
        exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), data + 3 * sum(range(16)))


def test_cluster_and_cooperative_attributes_launch(device, gmod):
    if device.compute_capability < (9, 0):
        pytest.skip("thread-block clusters need compute capability 9.0")
    data = np.arange(N, dtype=np.float32)
    x = cg.DeviceBuffer.from_numpy(data, device)
    dag = cg.Dag()
    grid = 4  # N = 1000 elements fit in 4 blocks of 256
    a = dag.add_kernel(gmod.kernel("add_const"), grid, BLOCK, [x, 1.0, N], name="clustered")
    b = dag.add_kernel(gmod.kernel("add_const"), grid, BLOCK, [x, 2.0, N], name="cooperative")
    dag.add_dependency(a, b)
    dag.set_launch_attributes(a, cluster_dim=2, mem_sync_domain="remote")
    dag.set_launch_attributes(b, cooperative=True, access_window=x, hit_ratio=0.5)
    exec = dag.instantiate(device)
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), data + 3.0)


def _body_adding(gmod, x, a):
    d = cg.Dag()
    d.add_kernel(gmod.kernel("add_const"), GRID, BLOCK, [x, float(a), N])
    return d


def test_if_and_if_else_follow_the_kernel_set_flag(device, gmod):
    data = np.arange(N, dtype=np.float32)
    x = cg.DeviceBuffer.from_numpy(data, device)
    y = cg.DeviceBuffer.from_numpy(data, device)
    flag = cg.DeviceBuffer.from_numpy(np.zeros(1, np.uint32), device)
    dag = cg.Dag()
    h = dag.conditional_handle()
    h2 = dag.conditional_handle()
    d1 = dag.add_kernel(gmod.kernel("set_cond"), 1, 1, [h, flag])
    d2 = dag.add_kernel(gmod.kernel("set_cond"), 1, 1, [h2, flag])
    i = dag.add_if(h, _body_adding(gmod, x, 1.0), name="if")
    ie = dag.add_if_else(h2, _body_adding(gmod, y, 10.0), _body_adding(gmod, y, 100.0))
    dag.chain([d1, i])
    dag.chain([d2, ie])
    exec = dag.instantiate(device)
    want_x, want_y = data.copy(), data.copy()
    for f in (0, 1, 0, 1, 1):
        flag.copy_from(np.array([f], np.uint32))
        exec.launch()
        exec.synchronize()
        want_x += 1.0 if f else 0.0
        want_y += 10.0 if f else 100.0
        np.testing.assert_array_equal(x.to_numpy(), want_x)
        np.testing.assert_array_equal(y.to_numpy(), want_y)


def test_while_iterates_a_data_dependent_number_of_times(device, gmod):
    x = cg.DeviceBuffer(1, "float32", device)
    iters = cg.DeviceBuffer(1, "uint32", device)
    dag = cg.Dag()
    h = dag.conditional_handle(default=1)
    body = cg.Dag()
    body.add_kernel(gmod.kernel("halve"), 1, 1, [x, iters, 1.0, h])
    dag.add_while(h, body, name="halve until small")
    exec = dag.instantiate(device)
    for start in (1.0, 5.0, 1000.0, 1 << 20):
        x.copy_from(np.array([start], np.float32))
        iters.copy_from(np.zeros(1, np.uint32))
        exec.launch()
        exec.synchronize()
        v, count = np.float32(start), 0
        while True:
            v = np.float32(v * 0.5)
            count += 1
            if not v > 1.0:
                break
        assert iters.to_numpy()[0] == count, start
        assert x.to_numpy()[0] == v


def test_switch_runs_the_case_the_kernel_picks(device, gmod):
    data = np.arange(N, dtype=np.float32)
    x = cg.DeviceBuffer.from_numpy(data, device)
    pick = cg.DeviceBuffer(1, "uint32", device)
    dag = cg.Dag()
    h = dag.conditional_handle()
    d = dag.add_kernel(gmod.kernel("set_cond"), 1, 1, [h, pick])
    sw = dag.add_switch(h, [_body_adding(gmod, x, 10.0 ** j) for j in range(3)])
    dag.add_dependency(d, sw)
    exec = dag.instantiate(device)
    want = data.copy()
    for p in (2, 0, 7, 1):  # 7: no case runs
        pick.copy_from(np.array([p], np.uint32))
        exec.launch()
        exec.synchronize()
        want += 10.0 ** p if p < 3 else 0.0
        np.testing.assert_array_equal(x.to_numpy(), want)


def test_graph_allocation_filled_used_and_freed(device, gmod):
    data = np.arange(N, dtype=np.float32)
    y = cg.DeviceBuffer.from_numpy(data, device)
    dag = cg.Dag()
    a, scratch = dag.add_alloc(N, "float32", name="scratch")
    fill = dag.add_graph_memset(scratch, 1.5)
    bump = dag.add_kernel(gmod.kernel("add_const"), GRID, BLOCK, [scratch, 1.0, N])
    use = dag.add_kernel(gmod.kernel("add_from"), GRID, BLOCK, [y, scratch, N])
    free = dag.add_free(scratch)
    dag.chain([a, fill, bump, use, free])
    exec = dag.instantiate(device)
    for _ in range(3):
        exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(y.to_numpy(), data + 3 * 2.5)


def test_an_allocation_never_freed_needs_auto_free_on_launch(device, gmod):
    data = np.arange(N, dtype=np.float32)
    y = cg.DeviceBuffer.from_numpy(data, device)
    dag = cg.Dag()
    a, scratch = dag.add_alloc(N, "float32", name="leaky")
    fill = dag.add_graph_memset(scratch, 2.0)
    use = dag.add_kernel(gmod.kernel("add_from"), GRID, BLOCK, [y, scratch, N])
    dag.chain([a, fill, use])
    with pytest.raises(cg.ValidationError, match="auto_free_on_launch"):
        dag.instantiate(device)
    exec = dag.instantiate(device, auto_free_on_launch=True)
    exec.launch()  # the graph memory pool reserves its memory at the first launch
    exec.synchronize()
    free_before, _ = device.memory_info()
    for _ in range(100):
        exec.launch()
    exec.synchronize()
    free_after, _ = device.memory_info()
    np.testing.assert_array_equal(y.to_numpy(), data + 202.0)
    assert free_before - free_after < 2 << 20, (free_before, free_after)


UPDATERS = r"""
// Enables or disables `node` (flag[0]) and sets its float argument at byte offset 8 to a[0].
extern "C" __global__ void steer(cudaGraphDeviceNode_t node, const int* flag, const float* a) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cudaGraphKernelNodeSetEnabled(node, flag[0] != 0);
        float v = a[0];
        cudaGraphKernelNodeSetParam(node, 8, &v, sizeof(float));
    }
}
extern "C" __global__ void add_const(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += a;
}
"""


def test_a_kernel_disables_a_device_node_and_changes_its_argument(device):
    source = cg.DEVICE_UPDATE_INCLUDE + UPDATERS
    try:
        mod = cg.Module.from_source(source, device)
    except (cg.CompileError, cg.CudaError):
        # As the Rust GPU test: plain NVRTC output first, else linked with the device runtime.
        mod = cg.Module.from_source(source, device, device_runtime=True)
    data = np.arange(N, dtype=np.float32)
    x = cg.DeviceBuffer.from_numpy(data, device)
    flag = cg.DeviceBuffer(1, "int32", device)
    a = cg.DeviceBuffer(1, "float32", device)
    dag = cg.Dag()
    adder = dag.add_kernel(mod.kernel("add_const"), GRID, BLOCK, [x, 100.0, N])
    dn = dag.device_node(adder)
    steering = dag.add_kernel(mod.kernel("steer"), 1, 1, [dn, flag, a])
    dag.add_dependency(steering, adder)
    exec = dag.instantiate(device)
    want = data.copy()
    for f, v in zip((1, 0, 1, 0, 1), (1.0, 2.0, 3.0, 4.0, 5.0)):
        flag.copy_from(np.array([f], np.int32))
        a.copy_from(np.array([v], np.float32))
        exec.launch()
        exec.synchronize()
        want += v if f else 0.0
        np.testing.assert_array_equal(x.to_numpy(), want)
    with pytest.raises(cg.UpdateRefusedError):
        exec.update(dag)


def _cudart():
    """The CUDA runtime through ctypes (the library cudagraph loads), for enqueueing work on a
    capture stream without CuPy."""
    import ctypes

    for name in ("libcudart.so.13", "/usr/local/cuda/lib64/libcudart.so.13"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        pytest.fail("libcudart.so.13 not loadable through ctypes")
    rt.cudaMemsetAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaMemsetAsync.restype = ctypes.c_int
    return rt


def test_captured_work_runs_at_each_launch_not_at_capture(device, gmod):
    rt = _cudart()
    x = cg.DeviceBuffer.from_numpy(np.zeros(N, np.uint8), device)
    y = cg.DeviceBuffer.from_numpy(np.zeros(N, np.float32), device)
    ptr = x.__cuda_array_interface__["data"][0]
    seen = []

    def fill(stream):
        seen.append(stream)
        assert rt.cudaMemsetAsync(ptr, 7, N, stream.ptr) == 0

    dag = cg.Dag()
    c = dag.add_captured(fill, [x], what="cudaMemsetAsync 7")
    k = dag.add_kernel(gmod.kernel("add_const"), GRID, BLOCK, [y, 1.0, N])
    dag.add_dependency(c, k)
    exec = dag.instantiate(device)
    assert len(seen) == 1
    np.testing.assert_array_equal(x.to_numpy(), 0)  # recorded, not run
    with pytest.raises(cg.ValidationError, match="no longer capturing"):
        seen[0].ptr
    for _ in range(2):
        x.copy_from(np.zeros(N, np.uint8))
        exec.launch()
        exec.synchronize()
        np.testing.assert_array_equal(x.to_numpy(), 7)
    np.testing.assert_array_equal(y.to_numpy(), 2.0)
    exec.set_enabled(c, False)
    x.copy_from(np.zeros(N, np.uint8))
    exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(x.to_numpy(), 0)


def test_an_exception_in_captured_work_fails_instantiate_with_it_as_cause(device):
    def broken(stream):
        raise RuntimeError("no plan for this size")

    dag = cg.Dag()
    dag.add_captured(broken, name="plan")
    with pytest.raises(cg.CudaGraphError, match="no plan for this size") as e:
        dag.instantiate(device)
    assert isinstance(e.value.__cause__, RuntimeError)
    # Waiting for the GPU inside the capture is refused, not a broken capture.
    dag = cg.Dag()
    dag.add_captured(lambda s: device.synchronize())
    with pytest.raises(cg.CudaGraphError) as e:
        dag.instantiate(device)
    assert isinstance(e.value.__cause__, cg.ValidationError)


def test_cupy_work_captured_on_the_capture_stream(device, cupy):
    y = cupy.arange(N, dtype=cupy.float32)
    y *= 1  # CuPy compiles and loads its kernel now, not during the capture
    cupy.cuda.Device().synchronize()

    def double(stream):
        with cupy.cuda.ExternalStream(stream.ptr):
            y.__imul__(2)

    dag = cg.Dag(backend=device)
    dag.add_captured(double, [y], what="cupy y *= 2")
    exec = dag.instantiate(device)
    np.testing.assert_array_equal(cupy.asnumpy(y), np.arange(N, dtype=np.float32))
    for _ in range(3):
        exec.launch()
    exec.synchronize()
    np.testing.assert_array_equal(cupy.asnumpy(y), 8 * np.arange(N, dtype=np.float32))
