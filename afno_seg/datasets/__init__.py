"""Dataset transforms of afno_seg (registered in mmseg's TRANSFORMS on import)."""
from .transforms import BadSampleError, BadSampleGuard, ValidateSegMap

__all__ = ["BadSampleError", "BadSampleGuard", "ValidateSegMap"]
