"""Decode heads: SegFormer's all-MLP head evaluated at each input's own resolution
(:class:`LowResFusionSegformerHead`), which inference takes in place of mmseg's."""
from .segformer_head import HEADS, LowResFusionSegformerHead, use_low_res_fusion

__all__ = ['HEADS', 'LowResFusionSegformerHead', 'use_low_res_fusion']
