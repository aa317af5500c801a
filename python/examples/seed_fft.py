"""The scenario this project began with, as a block loop of a Python pipeline: one FFT plan
used forward then inverse in one CUDA graph, launched 1,000 times with per-launch callback
parameters (each launch reads its own input block and writes its own slots of two rings), no
synchronisation inside the loop, every output checked against numpy.fft afterwards.

In the framework this replaces, one FFT object used forward then inverse inside a captured
graph clobbered its own callback data. Here every FFT node has its own cuFFT handle and
callback parameters, and per-launch parameters apply to the launches queued after them.

Without a GPU, the same DAG is built, validated and lowered on a RecordingBackend, and the
CUDA calls it would make are printed.

    python python/examples/seed_fft.py
"""

import sys

import numpy as np

import cudagraph as cg

N = 256  # transform length
LAUNCHES = 1000


def build(backend, make_buffer):
    """The DAG: forward FFT (block k -> spectra[k]), inverse FFT (spectra[k] -> outputs[k]),
    both with the same plan."""
    plan = cg.FftPlan("c2c", N, load="complex_f32", store="scale")
    blocks = [make_buffer() for _ in range(LAUNCHES)]
    spectra = [make_buffer() for _ in range(LAUNCHES)]
    outputs = [make_buffer() for _ in range(LAUNCHES)]
    dag = cg.Dag(backend=backend)
    fwd = dag.add_fft(plan, blocks[0], spectra[0], "forward", name="forward")
    inv = dag.add_fft(
        plan, spectra[0], outputs[0], "inverse", store_scale=1.0 / N, name="inverse"
    )
    dag.add_dependency(fwd, inv)
    return dag, fwd, inv, blocks, spectra, outputs


def without_gpu(reason):
    print(f"no GPU ({reason}); lowering the DAG on a RecordingBackend instead\n")
    rec = cg.RecordingBackend()
    global LAUNCHES
    LAUNCHES = 2
    dag, _, _, *_ = build(rec, lambda: rec.device_buffer(N, "complex64"))
    dag.lower(rec)
    print(rec.transcript())
    print(dag.to_dot())


def main():
    try:
        device = cg.Device(0)
    except cg.NoGpuError as e:
        without_gpu(e)
        return 0
    rng = np.random.default_rng(7)
    data = (rng.standard_normal((LAUNCHES, N)) + 1j * rng.standard_normal((LAUNCHES, N))).astype(
        np.complex64
    )
    it = iter(data)
    dag, fwd, inv, blocks, spectra, outputs = build(
        device, lambda: cg.DeviceBuffer.from_numpy(next(it, data[0]), device)
    )
    exec = dag.instantiate(device)
    stream = cg.Stream(device)
    for k in range(LAUNCHES):  # no synchronisation in the loop
        exec.set_fft_params(fwd, load_input=blocks[k], store_output=spectra[k])
        exec.set_fft_params(inv, load_input=spectra[k], store_output=outputs[k], store_scale=1.0 / N)
        exec.launch(stream)
    exec.synchronize()
    worst_spectrum = worst_roundtrip = 0.0
    for k in range(LAUNCHES):
        want = np.fft.fft(data[k])
        got = spectra[k].to_numpy()
        worst_spectrum = max(worst_spectrum, float(np.max(np.abs(got - want)) / np.max(np.abs(want))))
        worst_roundtrip = max(worst_roundtrip, float(np.max(np.abs(outputs[k].to_numpy() - data[k]))))
    print(f"{LAUNCHES} launches: worst relative spectrum error {worst_spectrum:.2e}, "
          f"worst round-trip error {worst_roundtrip:.2e}")
    ok = worst_spectrum < 1e-4 and worst_roundtrip < 1e-4
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
