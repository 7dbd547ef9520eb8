"""The pre-norm encoder layer both backbones share; they differ only in the feed-forward network.

    x = x + DropPath(mixer(LN(x), (H, W)))
    x = x + DropPath(FFN(LN(x)))            the FFN adds the identity itself

:class:`~afno_seg.backbones.MixerMiT` uses SegFormer's Mix-FFN (a 3x3 depth-wise convolution
between the two point-wise layers, so it needs the grid); :class:`~afno_seg.backbones.MixerViT`
a point-wise MLP. The mixer is stored as ``attn`` (not ``mixer``) so that state-dict keys are
those of mmseg's MixVisionTransformer (``layers.{i}.1.{j}.attn.*``) and MiT weights load.
"""
from collections.abc import Iterable

import torch.nn as nn
import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import build_dropout
from mmcv.cnn.bricks.transformer import FFN
from mmengine.model import BaseModule
from mmseg.models.backbones.mit import MixFFN
from torch import Tensor

__all__ = ['MixerLayer', 'init_mixer_weights']


class MixerLayer(BaseModule):
    """The encoder layer: norms, the mixer, the FFN, drop-path and gradient checkpointing.

    Args:
        embed_dims (int): Channels C of the tokens.
        mixer (nn.Module): Token mixer, ``forward(x (B, N, C), hw_shape) -> (B, N, C)``.
        feedforward_channels (int): Hidden channels of the FFN.
        drop_rate (float): Dropout in the FFN. Default: 0.
        drop_path_rate (float): Stochastic-depth probability of both branches. Default: 0.
        act_cfg (dict): Activation of the FFN. Default: dict(type='GELU').
        norm_cfg (dict): Pre-norm layers. Default: dict(type='LN', eps=1e-6).
        with_cp (bool): Recompute the layer in backward (gradient checkpointing). Default: False.
        mix_ffn (bool): SegFormer's Mix-FFN (MixerMiT), else a point-wise MLP (MixerViT).
            Default: True.
    """

    def __init__(self, embed_dims: int, mixer: nn.Module, feedforward_channels: int,
                 drop_rate: float = 0., drop_path_rate: float = 0., act_cfg: dict | None = None,
                 norm_cfg: dict | None = None, with_cp: bool = False,
                 mix_ffn: bool = True) -> None:
        super().__init__()
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        drop_path = dict(type='DropPath', drop_prob=drop_path_rate)
        self.drop_path = build_dropout(drop_path)
        self.norm1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = mixer
        self.norm2 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.ffn = (MixFFN if mix_ffn else FFN)(
            embed_dims=embed_dims, feedforward_channels=feedforward_channels,
            act_cfg=act_cfg or dict(type='GELU'), ffn_drop=drop_rate, dropout_layer=drop_path)
        self.mix_ffn, self.with_cp = mix_ffn, with_cp

    def forward(self, x: Tensor, hw_shape: tuple[int, int]) -> Tensor:

        def _inner_forward(x: Tensor) -> Tensor:
            x = x + self.drop_path(self.attn(self.norm1(x), hw_shape))
            if self.mix_ffn:
                return self.ffn(self.norm2(x), hw_shape, identity=x)
            return self.ffn(self.norm2(x), identity=x)

        if self.with_cp and x.requires_grad:
            return cp.checkpoint(_inner_forward, x, use_reentrant=False)
        return _inner_forward(x)


def init_mixer_weights(layers: Iterable[MixerLayer]) -> None:
    """Run each mixer's own initialisation after a backbone's generic pass (trunc-normal Linear,
    unit LayerNorm) has overwritten it, for mixers that define one (or have an ``init_cfg``)."""
    for layer in layers:
        mixer = layer.attn
        if isinstance(mixer, BaseModule) and (
                mixer.init_cfg or type(mixer).init_weights is not BaseModule.init_weights):
            mixer.init_weights()
