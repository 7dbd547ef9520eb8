"""mmseg's ``SegformerHead`` with its fusion conv applied before upsampling: same parameters,
same function, a third of the work.

mmseg's head projects each backbone map ``x_i`` to ``C`` channels (``p_i = P_i x_i``, a 1x1
ConvModule), resizes all to the finest map's size (``up``), concatenates them and fuses with a
1x1 conv ``W`` of shape ``(C, n C)``, norm and activation::

    y = act(norm(W cat_i up(p_i))) = act(norm(sum_i up(W_i p_i)))

with ``W_i`` the i-th ``C``-column block of ``W``: a 1x1 conv mixes channels at each pixel and
``up`` (any ``F.interpolate`` mode) maps each channel's plane linearly, so the two commute; each
block runs at its input's own resolution and the ``(n C, H/4, W/4)`` concatenation is never
built. Fusion cost ``C^2 sum_i |x_i|`` multiply-adds instead of ``n C^2 |x_1|`` (SegFormer-B3 at
1024x1024, ``C = 768``: 51.3 instead of 154.6 GMAC, and no 0.8 GB fp32 concatenation). The state
dict is mmseg's; values, gradients included, equal mmseg's up to float rounding in training and
inference (``tests/test_decode_head.py``). Timings: ``BENCHMARKS.md`` ("Whole B3 models").
"""
import torch.nn.functional as F
from mmseg.models.decode_heads import SegformerHead
from mmseg.models.utils import resize
from mmseg.registry import MODELS
from torch import Tensor

__all__ = ['HEADS', 'LowResFusionSegformerHead', 'use_low_res_fusion']

# The benchmarks' choice of decode head: as the config says, or switched by use_low_res_fusion.
HEADS = ('stock', 'low-res')


@MODELS.register_module()
class LowResFusionSegformerHead(SegformerHead):
    """``SegformerHead`` (same arguments and parameters), fused at each input's resolution."""

    def forward(self, inputs: list[Tensor]) -> Tensor:
        inputs = [inputs[i] for i in self.in_index]  # 'multiple_select', always
        fusion = self.fusion_conv  # mmseg's: ConvModule, 1x1, order (conv, norm, act)
        size = inputs[0].shape[2:]
        out = None
        for x, project, block in zip(inputs, self.convs,
                                     fusion.conv.weight.chunk(len(inputs), dim=1)):
            part = F.conv2d(project(x), block)
            if part.shape[2:] != size:  # resizing to the same size is the identity
                part = resize(part, size=size, mode=self.interpolate_mode,
                              align_corners=self.align_corners)
            out = part if out is None else out + part
        if fusion.conv.bias is not None:  # a head without norm: the bias once, not per block
            out = out + fusion.conv.bias.view(1, -1, 1, 1)
        if fusion.with_norm:
            out = fusion.norm(out)
        if fusion.with_activation:
            out = fusion.activate(out)
        return self.cls_seg(out)


def use_low_res_fusion(model_cfg) -> bool:
    """Switch a model config's ``decode_head`` from mmseg's ``SegformerHead`` to
    :class:`LowResFusionSegformerHead` (same arguments and state dict), in place; returns whether
    it did. The inference tools, ``tools/test.py`` and the ONNX benchmark build models so."""
    head = model_cfg.get('decode_head')
    if not head or head.get('type') != 'SegformerHead':
        return False
    head['type'] = 'LowResFusionSegformerHead'
    return True
