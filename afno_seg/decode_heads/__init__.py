"""Decode heads: SegFormer's all-MLP head evaluated at each input's own resolution, as mmseg
implements it (:class:`LowResFusionSegformerHead`, which inference takes in place of mmseg's) and
as the paper's published models do (:class:`AllMLPHead`)."""
from .all_mlp_head import AllMLPHead
from .segformer_head import HEADS, LowResFusionSegformerHead, use_low_res_fusion

__all__ = ['AllMLPHead', 'HEADS', 'LowResFusionSegformerHead', 'use_low_res_fusion']
