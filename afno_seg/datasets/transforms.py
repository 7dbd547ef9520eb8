"""Data checks as mmcv transforms: a bad label file fails with its name and what is wrong."""
import numpy as np
from mmcv.transforms import BaseTransform
from mmseg.registry import TRANSFORMS

from ..engine.errors import UserError

__all__ = ['BadSampleError', 'ValidateSegMap']


class BadSampleError(UserError, ValueError):
    """A sample whose image or label cannot be used; the message names the file."""


@TRANSFORMS.register_module()
class ValidateSegMap(BaseTransform):
    """Check a loaded label map against the classes; put it right after ``LoadAnnotations``.

    Without it, a label of 33 in a 19-class dataset (a Cityscapes ``*_labelIds.png`` read instead of
    ``*_labelTrainIds.png``) surfaces as an index error deep inside the loss, or a CUDA
    device-side assert, naming no file.

    Args:
        num_classes (int): Valid labels are ``0 .. num_classes - 1``.
        ignore_index (int): The one extra allowed value. Default: 255.
    """

    def __init__(self, num_classes: int, ignore_index: int = 255) -> None:
        self.num_classes = num_classes
        self.ignore_index = ignore_index

    def transform(self, results: dict) -> dict:
        seg_map = results['gt_seg_map']
        path = results.get('seg_map_path', '<label map>')
        img_shape = results.get('ori_shape') or results.get('img_shape')
        if img_shape is not None and tuple(seg_map.shape[:2]) != tuple(img_shape[:2]):
            raise BadSampleError(
                f'{path}: label map is {seg_map.shape[1]}x{seg_map.shape[0]} (WxH) but its image '
                f'{results.get("img_path", "")} is {img_shape[1]}x{img_shape[0]}; they must match.')
        values = np.unique(seg_map)
        bad = values[(values >= self.num_classes) & (values != self.ignore_index)]
        if bad.size:
            raise BadSampleError(
                f'{path}: label values {bad.tolist()[:10]} are outside the {self.num_classes} '
                f'classes (0..{self.num_classes - 1}) and the ignore value {self.ignore_index}. '
                'Labels must be train ids: for Cityscapes, the *_gtFine_labelTrainIds.png made by '
                'tools/dataset/cityscapes.py, not *_labelIds.png.')
        return results

    def __repr__(self) -> str:
        return f'{type(self).__name__}(num_classes={self.num_classes}, ignore_index={self.ignore_index})'
