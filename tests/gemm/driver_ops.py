"""The few CUDA driver calls the hook tests need and torch does not expose, through ctypes:
a stream that waits on a 64-bit flag in device memory (cuStreamWaitValue64), a strided
device-to-device copy done by a copy engine (cuMemcpy2DAsync: no kernel, so no SM and no lazy
module load that could block the host while a gated kernel waits), and flags in pinned host
memory that a kernel polls and the CPU sets with a plain store (no stream between the release
and the kernel). Every call skips the test where the driver lacks it."""

from __future__ import annotations

import ctypes
import weakref

import pytest
import torch

CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_MEMORYTYPE_DEVICE = 2
CU_MEMHOSTALLOC_DEVICEMAP = 0x02


class _Memcpy2D(ctypes.Structure):
    """CUDA_MEMCPY2D (cuda.h), field for field."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t),
    ]


def _entry(lib, names, argtypes):
    for name in names:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            return fn
    pytest.skip(f"libcuda exports none of {names}")


class Driver:
    """libcuda's entry points; construct after torch has made the device's context current."""

    def __init__(self) -> None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            pytest.skip(f"no libcuda.so.1: {e}")
        self._wait = _entry(lib, ("cuStreamWaitValue64_v2", "cuStreamWaitValue64"),
                            [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint])
        self._copy_2d = _entry(lib, ("cuMemcpy2DAsync_v2",),
                               [ctypes.POINTER(_Memcpy2D), ctypes.c_void_p])
        self._host_alloc = _entry(lib, ("cuMemHostAlloc",),
                                  [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_uint])
        self._host_free = _entry(lib, ("cuMemFreeHost",), [ctypes.c_void_p])
        self._host_device_ptr = _entry(lib, ("cuMemHostGetDevicePointer_v2",),
                                       [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p,
                                        ctypes.c_uint])

    def wait_geq(self, stream: torch.cuda.Stream, flag: torch.Tensor, value: int) -> int:
        """Queues on `stream`: wait until the int64 `flag` (one element, device memory) >= value.
        Returns the CUresult (0: queued)."""
        assert flag.numel() == 1 and flag.dtype == torch.int64 and flag.is_cuda
        return self._wait(stream.cuda_stream, flag.data_ptr(), value, CU_STREAM_WAIT_VALUE_GEQ)

    def copy_2d(self, stream: torch.cuda.Stream, dst: torch.Tensor, src: torch.Tensor) -> int:
        """Queues on `stream` a copy-engine copy of the 2-D view `src` into `dst` (same shape and
        dtype, rows contiguous, on the device). Returns the CUresult (0: queued)."""
        assert dst.shape == src.shape and dst.dtype == src.dtype and dst.dim() == 2
        assert dst.stride(1) == 1 and src.stride(1) == 1
        p = _Memcpy2D()
        p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE
        p.srcDevice, p.dstDevice = src.data_ptr(), dst.data_ptr()
        p.srcPitch, p.dstPitch = src.stride(0) * src.element_size(), dst.stride(0) * dst.element_size()
        p.WidthInBytes, p.Height = src.shape[1] * src.element_size(), src.shape[0]
        return self._copy_2d(ctypes.byref(p), stream.cuda_stream)

    def host_flags(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n int64 zeros in pinned, device-mapped host memory, twice: (a CPU tensor, to set them
        with a plain store; a CUDA tensor over the same bytes, for a kernel to poll). The memory
        is freed when both are gone."""
        ptr = ctypes.c_void_p()
        rc = self._host_alloc(ctypes.byref(ptr), n * 8, CU_MEMHOSTALLOC_DEVICEMAP)
        assert rc == 0, f"cuMemHostAlloc({n * 8} bytes, DEVICEMAP): CUresult {rc}"
        words = (ctypes.c_int64 * n).from_address(ptr.value)
        weakref.finalize(words, self._host_free, ptr.value)
        host = torch.frombuffer(words, dtype=torch.int64)  # holds `words`
        host.zero_()
        dptr = ctypes.c_uint64()
        rc = self._host_device_ptr(ctypes.byref(dptr), ptr.value, 0)
        assert rc == 0, f"cuMemHostGetDevicePointer: CUresult {rc}"

        class _Interface:  # how torch.as_tensor adopts device memory it did not allocate
            __cuda_array_interface__ = {"shape": (n,), "typestr": "<i8", "data": (dptr.value, False),
                                        "version": 2}
            owner = host  # the CUDA tensor keeps this object, so the host memory, alive

        device = torch.as_tensor(_Interface())  # on the device cudaPointerGetAttributes names
        assert device.is_cuda and device.data_ptr() == dptr.value
        return host, device
