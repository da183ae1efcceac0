"""glibc malloc settings: keep a training process's freed memory for its next minibatch, or
return it at once where peak memory matters.

A CPU training step frees and reallocates its activations and gradients, ~15 MB for a
440-1024x4-2000 network at minibatch 512. With glibc's defaults, freed memory at the top of
the heap goes back to the OS once more than the trim threshold is free, and blocks above the
(self-adjusting) mmap threshold are mapped afresh, so every step faults those pages in again:
~3600 page faults, 5-10 ms of a 190 ms step measured here. Fixing both thresholds keeps the
pages; the heap's high-water mark becomes the process's resident size, which a training job
reaches at every step anyway.
"""
import ctypes
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20   # glibc's largest allowed value on 64-bit (HEAP_MAX_SIZE / 2)
_TRIM_THRESHOLD = (1 << 31) - 1   # mallopt takes an int: trim only past 2 GB free


def keep_freed_memory():
    """Set glibc's malloc to keep freed memory: blocks up to 32 MB come from the heap, and the
    heap is trimmed only when 2 GB of it are free. False where there is no glibc mallopt (then
    nothing changes)."""
    return _set_thresholds(_MMAP_THRESHOLD, _TRIM_THRESHOLD)


def return_freed_memory():
    """The opposite, for a program whose peak memory is its point (nnet-average-models): every
    block over 1 MB is mapped alone and unmapped when freed. By default glibc raises the mmap
    threshold to the largest block freed so far (up to 32 MB), so later tensors of that size come
    from the heap, whose freed holes stay resident: ~0.6 of a 96 MB model's bytes here."""
    return _set_thresholds(1 << 20, 1 << 20)


def _set_thresholds(mmap_threshold, trim_threshold):
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):   # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The mmap threshold first: setting either one stops glibc's own adjustment of both.
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(mallopt(_M_TRIM_THRESHOLD, trim_threshold))
