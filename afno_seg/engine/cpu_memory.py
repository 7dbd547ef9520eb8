"""A CPU training step re-uses its large activations' memory instead of page-faulting it in anew
each step (glibc unmaps freed large blocks, torch's CPU allocator caches none; BENCHMARKS.md)."""
import ctypes
import os
import platform

__all__ = ['cache_freed_cpu_memory']

# <malloc.h>: mallopt's M_TRIM_THRESHOLD and M_MMAP_THRESHOLD, set to the largest int it takes.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _LARGEST = -1, -3, 2**31 - 1


def cache_freed_cpu_memory() -> bool:
    """Keep freed large blocks in the heap (the resident size stays at the peak, as on CUDA); True
    when in effect, False with ``AFNO_SEG_CPU_MEMORY_CACHE=0`` or without glibc."""
    if os.environ.get('AFNO_SEG_CPU_MEMORY_CACHE', '1').lower() in ('0', 'false', 'no', 'off') \
            or platform.libc_ver()[0] != 'glibc':
        return False
    mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: glibc's
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # Trim first: else freed memory at the top of the heap still goes back beyond 128 KiB.
    return bool(mallopt(_M_TRIM_THRESHOLD, _LARGEST) and mallopt(_M_MMAP_THRESHOLD, _LARGEST))
