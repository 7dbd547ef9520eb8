"""The SegFormer paper's all-MLP decoder as an mmseg decode head, evaluated at each input's own
resolution: the head of the published SegFormer models (NVIDIA's Cityscapes and ADE20K releases).

Reference:
    Xie et al., "SegFormer: Simple and Efficient Design for Semantic Segmentation with
    Transformers", NeurIPS 2021, arXiv:2105.15203, Sec. 3.2 (Eq. 4).

The paper: ``F_i' = Linear(C_i, C)(F_i)``, upsampled to the finest map ``H/4 x W/4``,
``F = Linear(4C, C)(Concat(F_i'))``, ``M = Linear(C, N_cls)(F)``. The released models realise the
fusing Linear as a 1x1 conv without bias followed by BatchNorm and ReLU, with dropout before the
classifier, and concatenate the stages deepest first (``c4, c3, c2, c1``); parameters here keep
that order: ``linear_c.{i}`` (stage i), ``linear_fuse.conv`` (column blocks for stages 4..1),
``linear_fuse.bn``, ``conv_seg``. (mmseg's ``SegformerHead`` differs: BN and ReLU after each
projection, stages concatenated in order; :mod:`.segformer_head`.)

Projection and fusion are both linear at each pixel, and bilinear upsampling maps each channel's
plane linearly with weights summing to one, so with ``W_i`` the fusion block of stage i::

    W cat_i up(P_i x_i + b_i) = sum_i up((W_i P_i) x_i) + sum_i W_i b_i

Each stage runs one ``(C, C_i)`` 1x1 conv at its own resolution and no ``(4C, H/4, W/4)``
concatenation is built: SegFormer-B3 at 1024x1024 (``C = 768``) spends 6.2 GMAC before the norm
(plus 0.6 composing the weights, at any image size) instead of 160.9. Values and gradients
equal the released form up to float rounding (``tests/test_segformer_weights.py``).
"""
import torch.nn.functional as F
from mmcv.cnn import ConvModule
from mmseg.models.decode_heads.decode_head import BaseDecodeHead
from mmseg.models.utils import resize
from mmseg.registry import MODELS
from torch import Tensor, nn

__all__ = ['AllMLPHead']


@MODELS.register_module()
class AllMLPHead(BaseDecodeHead):
    """SegFormer's all-MLP decoder (the published models' head), fused at each input's
    resolution.

    Args:
        interpolate_mode (str): Upsampling of the stage maps. Default: 'bilinear'.
        **kwargs: ``BaseDecodeHead``'s (``in_channels`` one per stage, ``channels`` = C,
            ``num_classes``, ``norm_cfg``, ``dropout_ratio``, ...); ``input_transform`` is
            'multiple_select'.
    """

    def __init__(self, interpolate_mode: str = 'bilinear', **kwargs) -> None:
        super().__init__(input_transform='multiple_select', **kwargs)
        self.interpolate_mode = interpolate_mode
        self.linear_c = nn.ModuleList(nn.Linear(c, self.channels) for c in self.in_channels)
        self.linear_fuse = ConvModule(len(self.in_channels) * self.channels, self.channels, 1,
                                      conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg,
                                      act_cfg=self.act_cfg)

    def forward(self, inputs: list[Tensor]) -> Tensor:
        inputs = [inputs[i] for i in self.in_index]  # 'multiple_select', always
        fuse = self.linear_fuse
        # Column blocks of the fusion weight, released order (deepest stage first) reversed.
        blocks = fuse.conv.weight.flatten(1).chunk(len(inputs), dim=1)[::-1]
        size, out, bias = inputs[0].shape[2:], None, fuse.conv.bias
        for x, linear, block in zip(inputs, self.linear_c, blocks):
            part = F.conv2d(x, (block @ linear.weight)[:, :, None, None])
            if part.shape[2:] != size:
                part = resize(part, size=size, mode=self.interpolate_mode,
                              align_corners=self.align_corners)
            out = part if out is None else out + part
            bias = block @ linear.bias if bias is None else bias + block @ linear.bias
        out = out + bias.view(1, -1, 1, 1)  # constant planes: upsampling leaves them unchanged
        if fuse.with_norm:
            out = fuse.norm(out)
        if fuse.with_activation:
            out = fuse.activate(out)
        return self.cls_seg(out)
