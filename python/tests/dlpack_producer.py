"""A DLPack producer for host-only tests: a device array that has ``__dlpack__`` and
``__dlpack_device__`` but no ``__cuda_array_interface__`` (as JAX arrays), its capsule and
managed tensor built with ctypes as a C producer builds them, its deleter counted."""

import ctypes
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64
from ctypes import c_void_p, py_object


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", c_void_p),
        ("device", DLDevice),
        ("ndim", c_int32),
        ("dtype", DLDataType),
        ("shape", POINTER(c_int64)),
        ("strides", POINTER(c_int64)),
        ("byte_offset", c_uint64),
    ]


DELETER = ctypes.CFUNCTYPE(None, c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", DELETER)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", c_void_p),
        ("deleter", DELETER),
        ("flags", c_uint64),
        ("dl_tensor", DLTensor),
    ]


_api = ctypes.pythonapi
_api.PyCapsule_New.restype = py_object
_api.PyCapsule_New.argtypes = [c_void_p, c_char_p, c_void_p]
_api.PyCapsule_GetName.restype = c_char_p
_api.PyCapsule_GetName.argtypes = [c_void_p]
_api.PyCapsule_GetPointer.restype = c_void_p
_api.PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]

UNUSED = (b"dltensor", b"dltensor_versioned")


@ctypes.CFUNCTYPE(None, c_void_p)
def _capsule_destructor(capsule):
    # As a producer's destructor: delete the tensor unless a consumer renamed the capsule.
    name = _api.PyCapsule_GetName(capsule)
    if name in UNUSED:
        tensor = _api.PyCapsule_GetPointer(capsule, name)
        _LIVE[tensor].deleter(tensor)


# Every tensor made and not yet deleted, by address: the ctypes objects behind it.
_LIVE = {}

FLOAT32 = (2, 32, 1)
CUDA = (2, 0)


class DlpackArray:
    """A device array that only DLPack describes. ``deleted`` counts the deleter's calls,
    ``calls`` the ``__dlpack__`` keyword arguments given."""

    def __init__(
        self,
        shape,
        dtype=FLOAT32,
        device=CUDA,
        ptr=0x7F00_0000,
        strides=None,
        byte_offset=0,
        version=(1, 0),
        readonly=False,
        legacy_only=False,
    ):
        self.shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.dtype, self.device, self.ptr = dtype, device, ptr
        self.strides, self.byte_offset = strides, byte_offset
        self.version, self.readonly, self.legacy_only = version, readonly, legacy_only
        self.deleted = 0
        self.calls = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        if self.legacy_only and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        self.calls.append(dict(stream=stream, max_version=max_version, **kwargs))
        versioned = max_version is not None and max_version[0] >= 1
        ndim = len(self.shape)
        shape = (c_int64 * max(ndim, 1))(*self.shape)
        strides = None if self.strides is None else (c_int64 * max(ndim, 1))(*self.strides)
        tensor = DLTensor(
            data=self.ptr,
            device=DLDevice(*self.device),
            ndim=ndim,
            dtype=DLDataType(*self.dtype),
            shape=shape,
            strides=strides,
            byte_offset=self.byte_offset,
        )

        def delete(address):
            self.deleted += 1
            del _LIVE[address]

        deleter = DELETER(delete)
        if versioned:
            managed = DLManagedTensorVersioned(
                version=DLPackVersion(*self.version),
                deleter=deleter,
                flags=1 if self.readonly else 0,
                dl_tensor=tensor,
            )
        else:
            managed = DLManagedTensor(dl_tensor=tensor, deleter=deleter)
        address = ctypes.addressof(managed)
        keep = (managed, shape, strides, deleter)
        _LIVE[address] = type("Live", (), dict(keep=keep, deleter=staticmethod(deleter)))
        name = UNUSED[1] if versioned else UNUSED[0]
        return _api.PyCapsule_New(
            address, name, ctypes.cast(_capsule_destructor, c_void_p).value
        )
