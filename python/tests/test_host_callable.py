"""Host-only tests of what a host callable may do: calls that would wait for the GPU raise
``ValidationError`` there, and objects dropped there wait in a graveyard until a later launch,
synchronize or drop outside a host callable frees them (CUDA calls are forbidden inside a host
function). ``_run_as_host_node`` runs a callable through the same wrapper a host node uses."""

import numpy as np
import pytest

import cudagraph as cg

run = cg._cudagraph._run_as_host_node
graveyard_len = cg._cudagraph._graveyard_len


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: cg._cudagraph._synchronize_all(), "_synchronize_all"),
        (lambda: cg.Device(0), "Device()"),
        (lambda: cg.Stream(), "Stream()"),
        (lambda: cg.DeviceBuffer(4), "DeviceBuffer()"),
        (lambda: cg.DeviceBuffer.from_numpy(np.zeros(4, np.float32)), "DeviceBuffer.from_numpy"),
        (lambda: cg.HostBuffer(4), "HostBuffer()"),
        (lambda: cg.HostBuffer.from_numpy(np.zeros(4, np.float32)), "HostBuffer.from_numpy"),
        (lambda: cg.Dag().instantiate(), "Dag.instantiate"),
        (lambda: cg.Module.from_source(""), "Module.from_source"),
    ],
)
def test_gpu_waits_inside_a_host_callable_raise_validation_error(call, name):
    err = run(call)
    assert isinstance(err, cg.HostCallbackError)
    assert isinstance(err.__cause__, cg.ValidationError), repr(err.__cause__)
    assert name in str(err.__cause__)
    assert "inside a host callable" in str(err.__cause__)


def test_the_host_callable_flag_is_cleared_afterwards():
    assert run(lambda: None) is None
    cg._cudagraph._synchronize_all()  # no ValidationError on this thread, nor after
    err = run(lambda: 1 / 0)
    assert isinstance(err.__cause__, ZeroDivisionError)
    cg._cudagraph._synchronize_all()


def test_objects_dropped_inside_a_host_callable_wait_in_the_graveyard(rec):
    cg._cudagraph._synchronize_all()  # empties the graveyard
    assert graveyard_len() == 0
    bufs = [rec.device_buffer(4), rec.host_buffer(4), rec.kernel("k", [8])]
    assert run(bufs.clear) is None
    assert graveyard_len() == 3, "not freed on the host-callback thread"
    cg._cudagraph._synchronize_all()
    assert graveyard_len() == 0


def test_a_drop_outside_a_host_callable_empties_the_graveyard(rec):
    bufs = [rec.device_buffer(4)]
    assert run(bufs.clear) is None
    assert graveyard_len() >= 1
    other = rec.device_buffer(4)
    del other
    assert graveyard_len() == 0



def test_after_the_exit_hook_host_callables_are_not_called():
    """A host node that runs after the atexit hook (a thread outliving it) must not take the
    GIL of a finalizing interpreter: it fails without calling the callable."""
    import subprocess
    import sys

    code = (
        "import cudagraph as cg\n"
        "cg._cudagraph._at_exit()\n"
        "err = cg._cudagraph._run_as_host_node(lambda: print('called'))\n"
        "print(type(err).__name__, err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "called" not in out.stdout.replace("not called", ""), out.stdout
    assert "HostCallbackError" in out.stdout and "shutting down" in out.stdout, out.stdout


def test_a_dag_is_usable_from_another_thread_and_from_a_host_callable():
    """Built in one thread, extended and drawn in another, and in a host callable (where
    building is allowed: it calls no CUDA); dropped in a host callable, it waits in the
    graveyard."""
    import threading

    dag = cg.Dag()
    dag.add_empty(name="main")
    t = threading.Thread(target=lambda: dag.add_empty(name="worker"))
    t.start()
    t.join()
    assert len(dag) == 2
    assert run(lambda: dag.add_empty(name="host")) is None
    assert len(dag) == 3 and "worker" in dag.to_dot()
    box = [cg.Dag()]
    before = graveyard_len()
    assert run(box.clear) is None
    assert graveyard_len() == before + 1, "a Dag dropped in a host callable waits"
    cg._cudagraph._synchronize_all()
    assert graveyard_len() == 0
