"""FFT plans and nodes without a GPU: plan checks, node checks naming the node, lowering on a
RecordingBackend (a parameter-setting kernel node and the captured transform per node)."""

import numpy as np
import pytest

import cudagraph as cg


def test_plan_checks_are_validation_errors():
    with pytest.raises(cg.ValidationError, match="rank 4"):
        cg.FftPlan("c2c", (2, 2, 2, 2))
    with pytest.raises(cg.ValidationError, match="not positive"):
        cg.FftPlan("c2c", 0)
    with pytest.raises(cg.ValidationError, match="FFT kind `c2q`"):
        cg.FftPlan("c2q", 8)
    with pytest.raises(cg.ValidationError, match="load callback `nope`"):
        cg.FftPlan("c2c", 8, load="nope")
    p = cg.FftPlan("c2c", 256, batch=4, store="scale")
    assert p.sizes == [256] and p.batch == 4 and p.has_store and not p.has_load


def test_one_plan_forward_then_inverse_lowers_two_transforms(rec):
    plan = cg.FftPlan("c2c", 1024, batch=2, store="scale")
    x = rec.device_buffer(2048, "complex64")
    y = rec.device_buffer(2048, "complex64")
    dag = cg.Dag()
    f = dag.add_fft(plan, x, y, "forward", name="fwd")
    i = dag.add_fft(plan, y, x, "inverse", store_scale=1 / 1024, name="inv")
    dag.add_dependency(f, i)
    dag.lower(rec)
    calls = rec.calls()
    captured = [c for c in calls if c["kind"] == "captured"]
    assert [c["name"] for c in captured] == ["fwd", "inv"]
    assert "dir=Forward" in captured[0]["params"] and "dir=Inverse" in captured[1]["params"]
    # Each node has its own cuFFT handle and parameter buffer (the seed bug: shared state).
    handles = {p.split("handle=")[1].split()[0] for p in (c["params"] for c in captured)}
    assert len(handles) == 2
    setters = [c for c in calls if c["kind"] == "kernel"]
    assert len(setters) == 2
    assert "params=0000803f" in setters[0]["params"]  # store scale 1.0
    assert "params=0000803a" in setters[1]["params"]  # store scale 1/1024
    assert "fwd" in dag.to_dot() and "inv" in dag.to_dot()


def test_fft_buffer_too_small_names_the_node(rec):
    plan = cg.FftPlan("c2c", 1024)
    dag = cg.Dag()
    with pytest.raises(cg.ValidationError, match="fft#0"):
        dag.add_fft(plan, rec.device_buffer(512, "complex64"), rec.device_buffer(1024, "complex64"))


def test_store_output_override_and_direction_words(rec):
    plan = cg.FftPlan("r2c", 64, store="power")
    x = rec.device_buffer(64, "float32")
    out = rec.device_buffer(33, "float32")  # |X|^2 as float32
    ring = [rec.device_buffer(33, "float32") for _ in range(3)]
    dag = cg.Dag()
    dag.add_fft(plan, x, out, -1, store_output=ring[1])
    assert dag.lower(rec) >= 2
    with pytest.raises(cg.ValidationError, match="writes 4-byte elements"):
        dag.add_fft(plan, x, rec.device_buffer(33, "complex64"), "forward")
    with pytest.raises(cg.ValidationError, match="direction `sideways`"):
        dag.add_fft(plan, x, out, "sideways")


def test_fft_keeps_foreign_arrays_alive(rec, fake):
    import gc
    import weakref

    plan = cg.FftPlan("c2c", 16)
    a = fake(16, typestr="<c8")
    ref = weakref.ref(a)
    dag = cg.Dag(backend=rec)
    dag.add_fft(plan, a, a)
    del a
    gc.collect()
    assert ref() is not None
    del dag
    gc.collect()
    assert ref() is None


def test_complex_i8_input_is_two_byte_elements(rec):
    plan = cg.FftPlan("c2c", 64, load="complex_i8", store="power")
    out = rec.device_buffer(64, "float32")
    dag = cg.Dag()
    dag.add_fft(plan, rec.device_buffer(64, "int16"), out)  # interleaved int8 pairs
    with pytest.raises(cg.ValidationError, match="1-byte elements"):
        dag.add_fft(plan, rec.device_buffer(128, "int8"), out)
    assert dag.lower(rec) >= 2
