"""MixerViT: an isotropic ViT-style backbone whose token mixer is pluggable (AFNO-ViT, GFNet, FNet).

References:
    Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token Mixers for Transformers",
    ICLR 2022, arXiv:2111.13587 (Section 5, Table 5: ImageNet-1K with a ViT whose self-attention
    is replaced by AFNO, GFN or FNet; 224x224 images, 16x16 patches, 12 layers, width 384).
    Dosovitskiy et al., "An Image is Worth 16x16 Words", ICLR 2021, arXiv:2010.11929 (the
    isotropic pre-norm encoder) and Touvron et al., "Training data-efficient image transformers"
    (DeiT), ICML 2021, arXiv:2012.12877 (the ImageNet-1K recipe of configs/mmpretrain/).
    Rao et al., "Global Filter Networks for Image Classification", NeurIPS 2021, arXiv:2107.00645
    (GFNet-XS: the same sizes without a class token, features averaged over the grid).

A ``p x p`` stride-``p`` convolution embeds an ``Hi x Wi`` image into an ``H x W = ceil(Hi / p) x
ceil(Wi / p)`` grid of C-channel tokens (zero-padded at the bottom/right); a learned position
embedding, stored for the grid of ``img_size`` and resized bicubically for other grids, is added;
then ``num_layers`` pre-norm :class:`~.encoder_layer.MixerLayer` s with a point-wise MLP
(``C -> mlp_ratio C -> C``, GELU) and a final LayerNorm. No class token: the mixers act on a grid,
and classification averages the output map (mmpretrain's ``GlobalAveragePooling`` neck and
``LinearClsHead``), as GFNet does. Cost per layer: the mixer's ``flops`` plus
``2 * 2 * mlp_ratio * C^2 * H W`` (MLP).
"""
import math
from collections.abc import Sequence

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import constant_init, kaiming_init, trunc_normal_, trunc_normal_init
from mmengine.utils import to_2tuple
from mmpretrain.models.utils import resize_pos_embed
from mmseg.models.utils import PatchEmbed, nlc_to_nchw
from torch import Tensor

from ..engine.checkpoint import read_state_dict
from ..engine.checkpoint_fit import load_state
from ..registry import register_model
from .encoder_layer import MixerLayer, init_mixer_weights
from .stage import build_mixer, mixer_list, stage_arguments

__all__ = ['MixerViT', 'VIT_ARCH_SETTINGS']

# DeiT's widths (Ti/S/B). 's' is the AFNO paper's Table 5 size (and GFNet-XS): 12 x 384.
# ``num_heads`` only reaches mixers that take it (attention); Fourier mixers ignore it.
VIT_ARCH_SETTINGS = {
    'ti': dict(embed_dims=192, num_layers=12, num_heads=3),
    's': dict(embed_dims=384, num_layers=12, num_heads=6),
    'b': dict(embed_dims=768, num_layers=12, num_heads=12),
}


@register_model
class MixerViT(BaseModule):
    """Isotropic (single-resolution) ViT with a pluggable token mixer; see the module docstring.

    Args:
        arch (str | dict): 'ti', 's' or 'b' (:data:`VIT_ARCH_SETTINGS`), or a dict with
            ``embed_dims``, ``num_layers`` and ``num_heads``. Default: 's'.
        mixers (dict | Sequence[dict]): Mixer config for every layer, or one per layer, built like
            MixerMiT's (:func:`~afno_seg.backbones.stage.build_mixer`) with ``embed_dims``,
            ``num_heads``, ``sr_ratio=1``, ``qkv_bias``, ``attn_drop_rate``, ``proj_drop_rate``
            (= ``drop_rate``), ``norm_cfg`` and ``base_hw_shape`` (the patch grid of
            ``img_size``) filled in where the constructor takes them.
            Default: dict(type='AFNOMixer').
        img_size (int | tuple[int, int]): Image size whose patch grid sizes the position embedding
            and grid-bound mixers (GFN); other sizes resize both. Default: 224.
        patch_size (int): Patch (and stride) of the embedding convolution. Default: 16.
        in_channels (int): Input channels. Default: 3.
        mlp_ratio (int): MLP hidden width / C. Default: 4.
        out_indices (Sequence[int]): Layers whose outputs are returned; negative counts from the
            end. Default: (-1,).
        qkv_bias (bool): Bias of attention projections (attention mixers). Default: True.
        drop_rate (float): Dropout after the position embedding and in the MLP. Default: 0.
        attn_drop_rate (float): Attention-weight dropout (attention mixers). Default: 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over layers. Default: 0.
        with_pos_embed (bool): Add the learned position embedding. Default: True.
        final_norm (bool): LayerNorm on the last layer's output. Default: True.
        act_cfg (dict): MLP activation. Default: dict(type='GELU').
        norm_cfg (dict): Norm layers. Default: dict(type='LN', eps=1e-6).
        with_cp (bool): Gradient checkpointing of every layer. Default: False.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH, prefix='backbone.')``
            loads a checkpoint strictly (a missing or unexpected tensor is an error); a position
            embedding of another grid is resized. Default: None.

    Returns (forward): tuple of ``(B, C, H, W)`` maps, one per ``out_indices``.
    """

    def __init__(self, arch: str | dict = 's', mixers: dict | Sequence[dict] | None = None,
                 img_size: int | Sequence[int] = 224, patch_size: int = 16, in_channels: int = 3,
                 mlp_ratio: int = 4, out_indices: Sequence[int] = (-1, ), qkv_bias: bool = True,
                 drop_rate: float = 0., attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 with_pos_embed: bool = True, final_norm: bool = True,
                 act_cfg: dict | None = None, norm_cfg: dict | None = None,
                 with_cp: bool = False, init_cfg: dict | None = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if isinstance(arch, str):
            if arch not in VIT_ARCH_SETTINGS:
                raise ValueError(f'unknown arch {arch!r}; choose one of '
                                 f'{", ".join(VIT_ARCH_SETTINGS)} or give a dict')
            arch = VIT_ARCH_SETTINGS[arch]
        missing = {'embed_dims', 'num_layers', 'num_heads'} - set(arch)
        if missing:
            raise ValueError(f'arch dict lacks {sorted(missing)}')
        self.embed_dims, self.num_layers = arch['embed_dims'], arch['num_layers']
        # PatchEmbed pads the bottom/right up to a multiple of the patch ('corner'): ceil division.
        self.base_hw_shape = tuple(math.ceil(size / patch_size) for size in to_2tuple(img_size))
        self.out_indices = tuple(i % self.num_layers if -self.num_layers <= i < self.num_layers
                                 else None for i in out_indices)
        if not self.out_indices or None in self.out_indices:
            raise ValueError(f'out_indices {tuple(out_indices)} must lie in '
                             f'[-{self.num_layers}, {self.num_layers})')
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        mixers = mixer_list(dict(type='AFNOMixer') if mixers is None else mixers, self.num_layers,
                            'num_layers')
        self.final_norm, self.with_cp = final_norm, with_cp

        self.patch_embed = PatchEmbed(in_channels=in_channels, embed_dims=self.embed_dims,
                                      kernel_size=patch_size, stride=patch_size,
                                      padding='corner', norm_cfg=None)
        self.pos_embed = nn.Parameter(
            torch.zeros(1, self.base_hw_shape[0] * self.base_hw_shape[1], self.embed_dims)
        ) if with_pos_embed else None
        self.drop_after_pos = nn.Dropout(p=drop_rate)
        mixer_args = stage_arguments(self.embed_dims, arch['num_heads'], 1, self.base_hw_shape,
                                     qkv_bias, attn_drop_rate, drop_rate, norm_cfg)
        dpr = torch.linspace(0, drop_path_rate, self.num_layers).tolist()
        self.layers = ModuleList([
            MixerLayer(self.embed_dims, build_mixer(mixers[i], **mixer_args),
                       feedforward_channels=mlp_ratio * self.embed_dims, drop_rate=drop_rate,
                       drop_path_rate=dpr[i], act_cfg=act_cfg, norm_cfg=norm_cfg,
                       with_cp=with_cp, mix_ffn=False) for i in range(self.num_layers)
        ])
        self.norm = build_norm_layer(norm_cfg, self.embed_dims)[1] if final_norm else None

    def init_weights(self) -> None:
        """ViT initialisation, each mixer's own ``init_weights``, then a ``Pretrained`` checkpoint.

        Linear and the position embedding: truncated normal (std 0.02); LayerNorm: 1, 0; the
        patch convolution: LeCun-style (Kaiming, fan-in, linear gain), as mmpretrain's ViT.
        """
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_init(m, std=.02, bias=0.)
            elif isinstance(m, nn.LayerNorm):
                constant_init(m, val=1., bias=0.)
        kaiming_init(self.patch_embed.projection, mode='fan_in', nonlinearity='linear')
        if self.pos_embed is not None:
            trunc_normal_(self.pos_embed, std=.02)
        init_mixer_weights(self.layers)
        init_cfg = self.init_cfg or {}
        if init_cfg.get('type') == 'Pretrained':
            self.load_pretrained(init_cfg['checkpoint'], prefix=init_cfg.get('prefix'))
        elif init_cfg:
            raise ValueError('MixerViT supports init_cfg=dict(type="Pretrained", checkpoint=..., '
                             f'prefix=...) only, got {init_cfg!r}')
        self._is_init = True

    def load_pretrained(self, path: str, prefix: str | None = None) -> None:
        """Load ``path`` (keys under ``prefix``, stripped) strictly; resize ``pos_embed``."""
        state = read_state_dict(path, prefix)
        theirs = state.get('pos_embed')
        if self.pos_embed is not None and theirs is not None and \
                theirs.shape != self.pos_embed.shape:
            # A square grid is the only one a token count alone determines.
            side = math.isqrt(theirs.shape[1])
            if side * side != theirs.shape[1]:
                raise ValueError(f'{path!r}: pos_embed of {theirs.shape[1]} tokens is not a square '
                                 'grid; resize it to this model\'s grid first')
            state['pos_embed'] = resize_pos_embed(theirs, (side, side), self.base_hw_shape,
                                                  num_extra_tokens=0)
        load_state(self, state, f'pretrained {path}')

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        x, hw_shape = self.patch_embed(x)
        if self.pos_embed is not None:
            x = x + resize_pos_embed(self.pos_embed, self.base_hw_shape, hw_shape,
                                     num_extra_tokens=0).to(x.dtype)
        x = self.drop_after_pos(x)
        outs = []
        for i, layer in enumerate(self.layers):
            x = layer(x, hw_shape)
            out = self.norm(x) if self.final_norm and i == self.num_layers - 1 else x
            if i in self.out_indices:
                outs.append(nlc_to_nchw(out, hw_shape))
        return tuple(outs)
