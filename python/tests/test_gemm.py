"""Host tests of GEMM nodes (``Dag.add_gemm``) on a recording backend's placeholder cuBLAS
handle: what lowering records, the checks naming the node, dtypes, foreign arrays and what the
node keeps alive. The GPU test against NumPy is in test_gpu.py."""

import gc
import weakref

import numpy as np
import pytest

import cudagraph as cg
from dlpack_producer import DlpackArray


def test_a_gemm_lowers_as_a_captured_product_with_its_settings(rec):
    blas = rec.blas()
    a = rec.device_buffer(6 * 4, "float32")
    b = rec.device_buffer(4 * 5, "float32")
    c = rec.device_buffer(6 * 5, "float32")
    dag = cg.Dag(backend=rec)
    node = dag.add_gemm(blas, a, b, c, m=6, n=5, k=4, alpha=2.0, beta=0.5,
                        workspace_bytes=1 << 20, name="product")
    dag.lower(rec)
    t = rec.transcript()
    assert ("work=`Sgemm NN m=6 n=5 k=4 lda=6 ldb=4 ldc=6 alpha=2.0 beta=0.5 "
            "workspace=1 MiB`") in t, t
    assert "`product`" in t, t
    assert "captured: Sgemm NN m=6 n=5 k=4" in dag.to_dot()


@pytest.mark.parametrize(
    "dtype, prefix, alpha, shown",
    [
        ("float64", "Dgemm", 3, "alpha=3.0"),
        ("complex64", "Cgemm", 1 + 2j, "alpha=Complex { re: 1.0, im: 2.0 }"),
        ("complex128", "Zgemm", np.complex128(0.5j), "alpha=Complex { re: 0.0, im: 0.5 }"),
    ],
)
def test_each_dtype_is_its_cublas_product(rec, dtype, prefix, alpha, shown):
    blas = rec.blas()
    a, b, c = (rec.device_buffer(n, dtype) for n in (2 * 3, 2 * 4, 3 * 4))
    dag = cg.Dag(backend=rec)
    # op(A) = Aᵀ (A stored 2 x 3), op(B) = Bᴴ or Bᵀ (B stored 4 x 2).
    dag.add_gemm(blas, a, b, c, m=3, n=4, k=2, trans_a="t",
                 trans_b="c" if dtype.startswith("complex") else True, alpha=alpha)
    dag.lower(rec)
    t = rec.transcript()
    assert f"{prefix} T" in t and "m=3 n=4 k=2 lda=2 ldb=4 ldc=3" in t, t
    assert shown in t, t


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(m=0, n=5, k=4), "every size must be at least 1"),
        (dict(m=6, n=5, k=4, lda=3), "A's leading dimension 3 is less than its stored row count 6"),
        (dict(m=6, n=6, k=4), "B"),
        (dict(m=6, n=5, k=4, workspace_bytes=0), "workspace must be at least 1 byte"),
    ],
)
def test_bad_products_are_validation_errors_naming_the_node(rec, kwargs, message):
    blas = rec.blas()
    a, b, c = (rec.device_buffer(n, "float32") for n in (24, 20, 30))
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match=message) as e:
        dag.add_gemm(blas, a, b, c, **kwargs)
    assert "gemm#" in str(e.value)
    assert len(dag) == 0


def test_operands_must_be_one_supported_dtype_and_c_not_an_input(rec):
    blas = rec.blas()
    dag = cg.Dag(backend=rec)
    f4 = rec.device_buffer(16, "float32")
    with pytest.raises(cg.ValidationError, match="hold float32, float64 and float32"):
        dag.add_gemm(blas, f4, rec.device_buffer(16, "float64"), rec.device_buffer(16, "float32"),
                     m=4, n=4, k=4)
    ints = [rec.device_buffer(16, "int32") for _ in range(3)]
    with pytest.raises(cg.ValidationError, match="GEMM of int32"):
        dag.add_gemm(blas, *ints, m=4, n=4, k=4)
    with pytest.raises(cg.ValidationError, match="C overlaps A"):
        dag.add_gemm(blas, f4, rec.device_buffer(16, "float32"), f4, m=4, n=4, k=4)
    with pytest.raises(cg.ValidationError, match="trans_a"):
        dag.add_gemm(blas, f4, rec.device_buffer(16, "float32"), rec.device_buffer(16, "float32"),
                     m=4, n=4, k=4, trans_a="x")
    with pytest.raises(cg.ValidationError, match="alpha must be a real number"):
        dag.add_gemm(blas, f4, rec.device_buffer(16, "float32"), rec.device_buffer(16, "float32"),
                     m=4, n=4, k=4, alpha=1j)
    with pytest.raises(cg.ValidationError, match="GEMM a: expected a DeviceBuffer"):
        dag.add_gemm(blas, np.zeros(16, np.float32), f4, rec.device_buffer(16, "float32"),
                     m=4, n=4, k=4)
    assert len(dag) == 0


def test_buffers_of_another_backend_are_refused(rec):
    other = cg.RecordingBackend()
    a, b, c = (other.device_buffer(16, "float32") for _ in range(3))
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="belongs to"):
        dag.add_gemm(rec.blas(), a, b, c, m=4, n=4, k=4)


def test_foreign_operands_are_kept_alive_and_a_read_only_c_is_refused(rec, fake):
    blas = rec.blas()
    a = fake(16, typestr="<f8")
    b = DlpackArray(16, dtype=(2, 64, 1))
    c = fake(16, typestr="<f8", ptr=0x7F00_1000)
    ref = weakref.ref(a)
    dag = cg.Dag(backend=rec)
    dag.add_gemm(blas, a, b, c, m=4, n=4, k=4)
    del a
    gc.collect()
    assert ref() is not None, "the node holds the array"
    assert b.deleted == 0, "and the DLPack tensor"
    del dag
    gc.collect()
    assert ref() is None and b.deleted == 1
    dag = cg.Dag(backend=rec)
    with pytest.raises(cg.ValidationError, match="GEMM c: the array is read-only"):
        dag.add_gemm(blas, fake(16), fake(16), fake(16, data=(0x7F00_2000, True)), m=4, n=4, k=4)


def test_placeholder_blas_is_not_a_cublas_handle(rec):
    with pytest.raises(cg.ValidationError):
        rec.blas().version


def test_blas_without_a_gpu_says_so():
    if cg.gpu_available():
        pytest.skip("a GPU is there")
    with pytest.raises(cg.NoGpuError):
        cg.Blas()
