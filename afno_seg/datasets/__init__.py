"""Dataset transforms of afno_seg (registered in mmseg's TRANSFORMS on import)."""
from .transforms import BadSampleError, ValidateSegMap

__all__ = ["BadSampleError", "ValidateSegMap"]
