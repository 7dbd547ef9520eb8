"""A CPU training step does not page-fault its large activations anew every step (glibc hands
freed large blocks back to the kernel, and torch's CPU allocator keeps no cache of its own).

glibc serves a request above ``M_MMAP_THRESHOLD`` (adaptive, at most 32 MiB on 64-bit) with a
fresh ``mmap`` and unmaps it on ``free``; each first touch of fresh memory is a page fault in
which the kernel zeroes a page. Raised mmap and trim thresholds keep freed blocks for reuse (the
trade of CUDA's caching allocator: the resident size stays at the peak); measured in
BENCHMARKS.md ("What made AFNO fast", item 7). glibc only, per process, inherited by forked
workers; ``AFNO_SEG_CPU_MEMORY_CACHE=0`` turns it off.
"""
import ctypes
import ctypes.util
import os
import platform

__all__ = ['CPU_MEMORY_CACHE_ENV', 'cache_freed_cpu_memory']

CPU_MEMORY_CACHE_ENV = 'AFNO_SEG_CPU_MEMORY_CACHE'
# <malloc.h>: parameter numbers of mallopt().
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
# mallopt takes an int; requests above this (2 GiB) still get their own mapping.
_LARGEST_THRESHOLD = 2**31 - 1

_applied = False


def cache_freed_cpu_memory() -> bool:
    """Serve large CPU allocations from the heap and keep freed ones there; True when in effect
    for this process, False on a libc without ``mallopt`` or with the switch off."""
    global _applied
    if _applied:
        return True
    if os.environ.get(CPU_MEMORY_CACHE_ENV, '1').strip().lower() in ('0', 'false', 'no', 'off'):
        return False
    if platform.libc_ver()[0] != 'glibc':  # musl's mallopt does nothing; others have none
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6').mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Trim first: with only the mmap threshold raised, freed top-of-heap memory would still be
    # handed back to the kernel (and faulted in again) once it exceeds the default 128 KiB.
    _applied = bool(mallopt(_M_TRIM_THRESHOLD, _LARGEST_THRESHOLD)
                    and mallopt(_M_MMAP_THRESHOLD, _LARGEST_THRESHOLD))
    return _applied
