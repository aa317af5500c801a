"""CPU cost per graph launch from Python, side by side (issue 30's "Measured" table).

For a chain of N kernels (N = 1, 10, 100), each `x[i] *= a` over 4,096 floats:

- cudagraph: `Exec.launch()` of a Dag of N kernel nodes on a cudagraph Stream, and beside it on
  the Exec's own stream (no argument) and on a CuPy stream (the foreign-stream path);
- CuPy: `cupy.cuda.Graph.launch()` of the same kernel (a RawKernel) captured N times;
- PyTorch: `CUDAGraph.replay()` of N `x.mul_(a)` captured (PyTorch's own elementwise kernel);
- cuda.core: `Graph.launch()` of the same kernel (compiled by cuda.core's `Program`) launched N
  times into a `GraphBuilder` (cuda.core's capture);

and the build + instantiate time of a 1,000-node chain: a cudagraph DAG against cuda.core's
explicit `GraphDefinition` where the installed cuda.core has it (its API is pre-1.0 and moves: a
failure is printed as such, not hidden). CPU time per launch is the
time of a loop of LAUNCHES launches without synchronisation (the GPU runs behind), divided by
LAUNCHES, each loop started on an idle GPU; the median of REPEATS such loops is printed, in
microseconds. For each N every method's graph is made first and run through one untimed loop;
then the methods' loops are interleaved, round by round, each round in a rotated order, so
that drift of the machine (clocks, other tenants) and the order of measurement weigh on every
method alike.

    python python/benches/launch_overhead.py
"""

import statistics
import sys
import time

import numpy as np

import cudagraph as cg

SOURCE = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
"""
ELEMS = 4096
LAUNCHES = 1000
REPEATS = 9
CHAINS = (1, 10, 100)


def loop_us(launch, sync):
    """CPU µs per launch of one loop of LAUNCHES launches, started and ended on an idle GPU."""
    sync()
    t0 = time.perf_counter()
    for _ in range(LAUNCHES):
        launch()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / LAUNCHES * 1e6


def interleaved_us(setups):
    """{name: median µs per launch} of the (launch, sync) pairs in ``setups`` ({name: pair or
    an error string}), measured round by round in rotated order after one untimed loop each.
    Error strings are passed through."""
    ready = [(name, pair) for name, pair in setups.items() if not isinstance(pair, str)]
    for _, (launch, sync) in ready:
        loop_us(launch, sync)
    samples = {name: [] for name, _ in ready}
    for r in range(REPEATS):
        for i in range(len(ready)):
            name, (launch, sync) = ready[(i + r) % len(ready)]
            samples[name].append(loop_us(launch, sync))
    return {
        name: (pair if isinstance(pair, str) else statistics.median(samples[name]))
        for name, pair in setups.items()
    }


def bench_cudagraph(device, n, on="stream"):
    """``on``: "stream" (a cg.Stream), "own" (no argument: the Exec's own stream) or "cupy"
    (a CuPy stream, the foreign-stream path)."""
    kernel = cg.Module.from_source(SOURCE, device).kernel("scale")
    x = cg.DeviceBuffer(ELEMS, "float32", device)
    dag = cg.Dag()
    nodes = [dag.add_kernel(kernel, ELEMS // 256, 256, [x, 1.0, ELEMS]) for _ in range(n)]
    dag.chain(nodes)
    exec = dag.instantiate(device)
    if on == "own":
        return exec.launch, exec.synchronize
    if on == "cupy":
        import cupy as cp

        stream = cp.cuda.Stream(non_blocking=True)
    else:
        stream = cg.Stream(device)
    return (lambda: exec.launch(stream)), exec.synchronize


def bench_cupy(n):
    import cupy as cp

    kernel = cp.RawKernel(SOURCE, "scale")
    x = cp.zeros(ELEMS, dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for _ in range(n):
            kernel((ELEMS // 256,), (256,), (x, np.float32(1.0), np.int32(ELEMS)))
        graph = stream.end_capture()
    graph.upload(stream)
    return (lambda: graph.launch(stream)), stream.synchronize


def bench_torch(n):
    import torch

    x = torch.zeros(ELEMS, dtype=torch.float32, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            x.mul_(1.0)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(n):
            x.mul_(1.0)
    return graph.replay, torch.cuda.synchronize


def _cuda_core():
    """cuda.core, at its top level (0.4 and later) or under ``experimental`` (earlier)."""
    try:
        import cuda.core as cc

        if hasattr(cc, "Program"):
            return cc
    except ImportError:
        pass
    import cuda.core.experimental as cc

    return cc


def _cuda_core_kernel():
    cc = _cuda_core()
    dev = cc.Device(0)
    dev.set_current()
    options = cc.ProgramOptions(arch=f"sm_{dev.arch}")
    kernel = cc.Program(SOURCE, code_type="c++", options=options).compile("cubin")
    return cc, dev, kernel.get_kernel("scale")


def _cuda_core_args(x):
    """The kernel's arguments for cuda.core: the CuPy array's pointer (a 64-bit NumPy integer:
    cuda.core's launch refuses ``ctypes.c_void_p``), then the scalars."""
    return np.uint64(x.data.ptr), np.float32(1.0), np.int32(ELEMS)


def bench_cuda_core(n):
    import cupy as cp

    cc, dev, kernel = _cuda_core_kernel()
    x = cp.zeros(ELEMS, dtype=cp.float32)
    stream = dev.create_stream()
    config = cc.LaunchConfig(grid=ELEMS // 256, block=256)
    builder = stream.create_graph_builder().begin_building()
    for _ in range(n):
        cc.launch(builder, config, kernel, *_cuda_core_args(x))
    graph = builder.end_building().complete()
    graph.upload(stream)
    return (lambda: graph.launch(stream)), stream.sync


def build_1000_cuda_core():
    """ms to define a 1,000-kernel chain with cuda.core's GraphDefinition, and to instantiate."""
    import cupy as cp

    cc, dev, kernel = _cuda_core_kernel()
    definition = getattr(getattr(cc, "graph", None), "GraphDefinition", None)
    if definition is None:
        raise RuntimeError("this cuda.core has no cuda.core.graph.GraphDefinition")
    x = cp.zeros(ELEMS, dtype=cp.float32)
    config = cc.LaunchConfig(grid=ELEMS // 256, block=256)
    args = _cuda_core_args(x)
    t0 = time.perf_counter()
    g = definition()
    node = g.launch(config, kernel, *args)
    for _ in range(999):
        node = node.launch(config, kernel, *args)
    t1 = time.perf_counter()
    graph = g.instantiate()
    t2 = time.perf_counter()
    del graph
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def build_1000(device):
    kernel = cg.Module.from_source(SOURCE, device).kernel("scale")
    x = cg.DeviceBuffer(ELEMS, "float32", device)
    t0 = time.perf_counter()
    dag = cg.Dag()
    nodes = [dag.add_kernel(kernel, ELEMS // 256, 256, [x, 1.0, ELEMS]) for _ in range(1000)]
    dag.chain(nodes)
    t1 = time.perf_counter()
    exec = dag.instantiate(device)
    t2 = time.perf_counter()
    del exec
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def guarded(f, *args):
    """``f(*args)`` (a method's (launch, sync) pair), or why it is not there, as a string."""
    try:
        return f(*args)
    except ImportError as e:
        return f"{'n/a':>8} ({e.name} not installed)"
    except Exception as e:  # report and go on: one library's failure is not the others'
        return f"{'error':>8} ({type(e).__name__}: {e})"


def cell(v):
    return v if isinstance(v, str) else f"{v:8.2f}"


def main():
    try:
        device = cg.Device(0)
    except cg.NoGpuError as e:
        print(f"needs a GPU: {e}")
        return 0
    print(f"{device.name}; CPU µs per launch from Python (median of {REPEATS} x {LAUNCHES})")
    print(
        "cudagraph: Exec.launch(s) on a cg.Stream; (own): Exec.launch() on the Exec's own "
        "stream; (CuPy s.): on a CuPy stream"
    )
    print(
        f"{'N':>4} | {'cudagraph':>9} | {'(own)':>8} | {'(CuPy s.)':>9} | {'CuPy':>8} | "
        f"{'PyTorch':>8} | cuda.core"
    )
    for n in CHAINS:
        us = interleaved_us(
            {
                "cudagraph": guarded(bench_cudagraph, device, n),
                "own": guarded(bench_cudagraph, device, n, "own"),
                "cupy stream": guarded(bench_cudagraph, device, n, "cupy"),
                "CuPy": guarded(bench_cupy, n),
                "PyTorch": guarded(bench_torch, n),
                "cuda.core": guarded(bench_cuda_core, n),
            }
        )
        print(
            f"{n:>4} | {cell(us['cudagraph']):>9} | {cell(us['own'])} | "
            f"{cell(us['cupy stream']):>9} | {cell(us['CuPy'])} | {cell(us['PyTorch'])} | "
            f"{cell(us['cuda.core'])}"
        )
    build_ms, inst_ms = build_1000(device)
    print(f"1,000-node DAG: built in {build_ms:.1f} ms, instantiated in {inst_ms:.1f} ms")
    try:
        build_ms, inst_ms = build_1000_cuda_core()
        print(
            f"1,000-node cuda.core GraphDefinition: built in {build_ms:.1f} ms, "
            f"instantiated in {inst_ms:.1f} ms"
        )
    except Exception as e:  # printed: the table's other rows stand
        print(f"1,000-node cuda.core GraphDefinition: not measured ({type(e).__name__}: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
