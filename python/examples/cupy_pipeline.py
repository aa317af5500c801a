"""CuPy arrays in, a memset + FFT + detection-kernel graph, CuPy arrays out.

Complex 8-bit samples (as a radio receiver gives them) are converted while cuFFT loads them
(the plan's `complex_i8` load callback), transformed, detected (|X|^2, the `power` store
callback) into a CuPy float32 array, and a kernel counts the channels above a threshold into a
CuPy counter that a memset node zeroes first. The graph is launched on a CuPy stream, for
several blocks, and every result is checked against NumPy.

Needs a GPU and CuPy (for CUDA 13): `pip install cupy-cuda13x`.

    python python/examples/cupy_pipeline.py
"""

import sys

import numpy as np

import cudagraph as cg

N, BATCH, BLOCKS = 1024, 16, 10
THRESHOLD = 3.0e4

DETECT = r"""
extern "C" __global__ void detect(const float* power, float threshold, int n, unsigned int* count) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && power[i] > threshold) atomicAdd(count, 1u);
}
"""


def main():
    try:
        import cupy as cp
    except ImportError:
        print("this example needs CuPy (pip install cupy-cuda13x)")
        return 0
    try:
        device = cg.Device(0)
    except cg.NoGpuError as e:
        print(f"this example needs a GPU: {e}")
        return 0
    detect = cg.Module.from_source(DETECT, device).kernel("detect")
    plan = cg.FftPlan("c2c", N, batch=BATCH, load="complex_i8", store="power")

    # Interleaved (re, im) int8 pairs, seen as one 2-byte element each (cuFFT's char2): an FFT
    # node checks its buffers' element sizes against the plan's.
    samples = cp.zeros(N * BATCH, dtype=cp.int16)
    power = cp.zeros(N * BATCH, dtype=cp.float32)
    count = cp.zeros(1, dtype=cp.uint32)

    dag = cg.Dag(backend=device)
    zero = dag.add_memset(count, np.uint32(0), name="zero count")
    fft = dag.add_fft(plan, samples, power, "forward", name="fft + |X|^2")
    n = N * BATCH
    det = dag.add_kernel(detect, (n + 255) // 256, 256, [power, THRESHOLD, n, count], name="detect")
    dag.chain([zero, fft, det])
    exec = dag.instantiate(device)

    stream = cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(3)
    ok = True
    for b in range(BLOCKS):
        block = rng.integers(-20, 20, size=2 * N * BATCH, dtype=np.int8)
        with stream:
            samples.set(block.view(np.int16))  # ordered before the launch on the same stream
        exec.launch(stream)
        stream.synchronize()
        x = block.astype(np.float32).view(np.complex64).reshape(BATCH, N)
        want_power = np.abs(np.fft.fft(x, axis=1)) ** 2
        got_power = cp.asnumpy(power).reshape(BATCH, N)
        rel = np.max(np.abs(got_power - want_power)) / np.max(want_power)
        want_count = int(np.sum(want_power > THRESHOLD))
        got_count = int(cp.asnumpy(count)[0])
        # Channels within rounding of the threshold may fall either way.
        near = int(np.sum(np.abs(want_power - THRESHOLD) < 1e-3 * THRESHOLD))
        good = rel < 1e-4 and abs(got_count - want_count) <= near
        ok &= good
        print(f"block {b}: {got_count} detections (NumPy {want_count}), power rel. error {rel:.1e}")
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
