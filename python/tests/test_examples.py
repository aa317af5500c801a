"""The examples run: without a GPU, seed_fft.py lowers its DAG on a RecordingBackend; on a GPU
both check their results against NumPy (exit status 0 only when they match)."""

import pathlib
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def run(name):
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=600
    )


def test_seed_fft_example():
    r = run("seed_fft.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("OK" in r.stdout) or ("RecordingBackend" in r.stdout and "cufftExec" in r.stdout)


@pytest.mark.gpu
def test_cupy_pipeline_example(device, cupy):
    r = run("cupy_pipeline.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("OK")
