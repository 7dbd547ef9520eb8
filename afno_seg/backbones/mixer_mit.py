"""MixerMiT: SegFormer's Mix Transformer (MiT) with the token mixer chosen per stage.

References:
    Xie et al., "SegFormer: Simple and Efficient Design for Semantic Segmentation with
    Transformers", NeurIPS 2021, arXiv:2105.15203 (the MiT hierarchy, Mix-FFN, B0-B5 sizes).
    Guibas et al., "Adaptive Fourier Neural Operators: Efficient Token Mixers for Transformers",
    ICLR 2022, arXiv:2111.13587 (SegFormer-B3 with its attention replaced by other mixers).

The module tree and parameter names are those of mmseg's ``MixVisionTransformer``, so MiT
ImageNet checkpoints load into every variant (:mod:`afno_seg.backbones.mit_checkpoint`).
"""
import copy
import math
from collections.abc import Sequence

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule, ModuleList
from mmengine.model.weight_init import constant_init, normal_init, trunc_normal_init
from mmseg.models.utils import PatchEmbed, nlc_to_nchw
from torch import Tensor

from ..registry import register_model
from .encoder_layer import MixerLayer, init_mixer_weights
from .mit_checkpoint import load_pretrained_mit
from .stage import build_mixer, mixer_list, stage_arguments, stage_grids

__all__ = ['ARCH_SETTINGS', 'MixerMiT']

# SegFormer's B0-B5 (Table 6 of the paper); all share patch sizes, strides and reductions.
ARCH_SETTINGS = {
    'b0': dict(embed_dims=32, num_layers=[2, 2, 2, 2], num_heads=[1, 2, 5, 8]),
    'b1': dict(embed_dims=64, num_layers=[2, 2, 2, 2], num_heads=[1, 2, 5, 8]),
    'b2': dict(embed_dims=64, num_layers=[3, 4, 6, 3], num_heads=[1, 2, 5, 8]),
    'b3': dict(embed_dims=64, num_layers=[3, 4, 18, 3], num_heads=[1, 2, 5, 8]),
    'b4': dict(embed_dims=64, num_layers=[3, 8, 27, 3], num_heads=[1, 2, 5, 8]),
    'b5': dict(embed_dims=64, num_layers=[3, 6, 40, 3], num_heads=[1, 2, 5, 8]),
}
# mmseg MixVisionTransformer's defaults, used when no ``arch`` is given.
DEFAULT_SIZES = dict(embed_dims=64, num_layers=[3, 4, 6, 3], num_heads=[1, 2, 4, 8])


@register_model
class MixerMiT(BaseModule):
    """SegFormer's MiT backbone with a pluggable token mixer per stage.

    Stage i embeds its input with an overlapping strided convolution (``PatchEmbed``), applies
    ``num_layers[i]`` :class:`~.encoder_layer.MixerLayer` s and a LayerNorm, and returns a
    ``(B, embed_dims * num_heads[i], H_i, W_i)`` map. With the default mixer
    (EfficientSelfAttentionMixer) this is mmseg's MixVisionTransformer, parameter for parameter.

    Args:
        arch (str, optional): 'b0'..'b5' sets ``embed_dims``, ``num_layers`` and ``num_heads`` as in
            SegFormer; giving any of them too is an error unless it agrees. Default: None (mmseg's
            MixVisionTransformer defaults: 64, [3, 4, 6, 3], [1, 2, 4, 8]).
        mixers (dict | Sequence[dict], optional): Mixer config for all stages, or one per stage,
            built by :func:`~.stage.build_mixer` with ``embed_dims`` (stage width), ``num_heads``,
            ``sr_ratio``, ``qkv_bias``, ``attn_drop_rate``, ``proj_drop_rate`` (= ``drop_rate``),
            ``norm_cfg`` and ``base_hw_shape`` (stage grid of ``base_img_size``) filled in only
            where the mixer's constructor takes them and the config leaves them out.
            Default: None (dict(type='EfficientSelfAttentionMixer'), i.e. SegFormer).
        base_img_size (int | tuple[int, int]): Image size whose stage grids parameterise mixers
            that store a grid (GlobalFilterMixer's ``base_hw_shape``). Default: 224.
        in_channels (int): Input channels. Default: 3.
        embed_dims (int, optional): Stage-1 width unit; stage i has ``embed_dims * num_heads[i]``.
        num_stages (int): Number of stages. Default: 4.
        num_layers (Sequence[int], optional): Encoder layers per stage.
        num_heads (Sequence[int], optional): Attention heads per stage (also the width multiplier).
        patch_sizes (Sequence[int]): Patch-embedding kernel per stage. Default: [7, 3, 3, 3].
        strides (Sequence[int]): Patch-embedding stride per stage. Default: [4, 2, 2, 2].
        sr_ratios (Sequence[int]): Spatial reduction of efficient attention. Default: [8, 4, 2, 1].
        out_indices (Sequence[int]): Stages whose outputs are returned. Default: (0, 1, 2, 3).
        mlp_ratio (int): Mix-FFN hidden width / channels. Default: 4.
        qkv_bias (bool): Bias of the attention projections. Default: True.
        drop_rate (float): Dropout after projections and in the Mix-FFN. Default: 0.
        attn_drop_rate (float): Dropout on attention weights. Default: 0.
        drop_path_rate (float): Stochastic depth, linearly increasing over layers. Default: 0.
        act_cfg (dict): Mix-FFN activation. Default: dict(type='GELU').
        norm_cfg (dict): Norm layers. Default: dict(type='LN', eps=1e-6).
        pretrained (str, optional): Deprecated; same as ``init_cfg=dict(type='Pretrained', ...)``.
        init_cfg (dict, optional): ``dict(type='Pretrained', checkpoint=PATH)`` loads a MiT
            checkpoint in the official SegFormer or in mmseg's layout. Default: None.
        with_cp (bool): Gradient checkpointing of every encoder layer. Default: False.
    """

    def __init__(self, arch: str | None = None, mixers: dict | Sequence[dict] | None = None,
                 base_img_size: int | Sequence[int] = 224, in_channels: int = 3,
                 embed_dims: int | None = None, num_stages: int = 4,
                 num_layers: Sequence[int] | None = None, num_heads: Sequence[int] | None = None,
                 patch_sizes: Sequence[int] = (7, 3, 3, 3), strides: Sequence[int] = (4, 2, 2, 2),
                 sr_ratios: Sequence[int] = (8, 4, 2, 1), out_indices: Sequence[int] = (0, 1, 2, 3),
                 mlp_ratio: int = 4, qkv_bias: bool = True, drop_rate: float = 0.,
                 attn_drop_rate: float = 0., drop_path_rate: float = 0.,
                 act_cfg: dict | None = None, norm_cfg: dict | None = None,
                 pretrained: str | None = None, init_cfg: dict | None = None,
                 with_cp: bool = False) -> None:
        if pretrained is not None and init_cfg is not None:
            raise ValueError('give either pretrained or init_cfg, not both')
        if pretrained is not None:
            if not isinstance(pretrained, str):
                raise TypeError(f'pretrained must be a path (str), got {type(pretrained).__name__}')
            init_cfg = dict(type='Pretrained', checkpoint=pretrained)
        if init_cfg and not (isinstance(init_cfg, dict) and init_cfg.get('type') == 'Pretrained'
                             and 'checkpoint' in init_cfg):
            raise ValueError('MixerMiT takes init_cfg=dict(type="Pretrained", checkpoint=PATH) or '
                             f'None (MiT initialisation), got {init_cfg!r}')
        super().__init__(init_cfg=init_cfg)
        sizes = self._resolve_sizes(arch, embed_dims=embed_dims, num_layers=num_layers,
                                    num_heads=num_heads)
        self.arch, self.embed_dims = arch, sizes['embed_dims']
        self.num_layers, self.num_heads = list(sizes['num_layers']), list(sizes['num_heads'])
        per_stage = dict(num_layers=self.num_layers, num_heads=self.num_heads,
                         patch_sizes=patch_sizes, strides=strides, sr_ratios=sr_ratios)
        for name, values in per_stage.items():
            if len(values) != num_stages:
                raise ValueError(f'{name} has {len(values)} entries for num_stages={num_stages}')
        if not out_indices or any(not 0 <= i < num_stages for i in out_indices):
            raise ValueError(f'out_indices {tuple(out_indices)} must lie in [0, {num_stages})')
        mixers = mixer_list(dict(type='EfficientSelfAttentionMixer') if mixers is None else mixers,
                            num_stages, 'num_stages')
        self.num_stages, self.out_indices, self.with_cp = num_stages, tuple(out_indices), with_cp
        norm_cfg = norm_cfg or dict(type='LN', eps=1e-6)
        base_grids = stage_grids(base_img_size, patch_sizes, strides)

        dpr = torch.linspace(0, drop_path_rate, sum(self.num_layers)).tolist()
        self.layers, cur = ModuleList(), 0
        for i, num_layer in enumerate(self.num_layers):
            width = self.embed_dims * self.num_heads[i]
            stage_args = stage_arguments(width, self.num_heads[i], sr_ratios[i], base_grids[i],
                                         qkv_bias, attn_drop_rate, drop_rate, norm_cfg)
            patch_embed = PatchEmbed(in_channels=in_channels, embed_dims=width,
                                     kernel_size=patch_sizes[i], stride=strides[i],
                                     padding=patch_sizes[i] // 2, norm_cfg=norm_cfg)
            layer = ModuleList([
                MixerLayer(width, build_mixer(mixers[i], **stage_args),
                                  feedforward_channels=mlp_ratio * width, drop_rate=drop_rate,
                                  drop_path_rate=dpr[cur + j], act_cfg=act_cfg, norm_cfg=norm_cfg,
                                  with_cp=with_cp) for j in range(num_layer)
            ])
            self.layers.append(ModuleList([patch_embed, layer,
                                           build_norm_layer(norm_cfg, width)[1]]))
            in_channels, cur = width, cur + num_layer

    @staticmethod
    def _resolve_sizes(arch: str | None, **given) -> dict:
        if arch is None:
            return {k: DEFAULT_SIZES[k] if v is None else v for k, v in given.items()}
        if arch not in ARCH_SETTINGS:
            raise ValueError(f'unknown arch {arch!r}; choose one of {", ".join(ARCH_SETTINGS)}')
        sizes = ARCH_SETTINGS[arch]
        for name, value in given.items():
            value = list(value) if isinstance(value, Sequence) else value
            if value is not None and value != sizes[name]:
                raise ValueError(f'arch={arch!r} sets {name}={sizes[name]}, but {name}={value} '
                                 'was given too; drop one of them')
        return copy.deepcopy(sizes)

    def init_weights(self) -> None:
        """MiT's initialisation, then each mixer's own ``init_weights``, then the checkpoint.

        Linear: truncated normal (std 0.02); LayerNorm: 1, 0; Conv2d: He normal on fan-out, exactly
        as mmseg's MixVisionTransformer. A mixer that needs another scheme overrides
        ``init_weights``; it runs after this pass. With ``init_cfg=dict(type='Pretrained', ...)``
        the checkpoint is then loaded and checked (:func:`load_pretrained_mit`).
        """
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal_init(m, std=.02, bias=0.)
            elif isinstance(m, nn.LayerNorm):
                constant_init(m, val=1.0, bias=0.)
            elif isinstance(m, nn.Conv2d):
                fan_out = m.kernel_size[0] * m.kernel_size[1] * m.out_channels // m.groups
                normal_init(m, mean=0, std=math.sqrt(2.0 / fan_out), bias=0)
        init_mixer_weights(layer for _, layers, _ in self.layers for layer in layers)
        if self.init_cfg:
            load_pretrained_mit(self, self.init_cfg['checkpoint'],
                                prefix=self.init_cfg.get('prefix'))
        self._is_init = True

    def forward(self, x: Tensor) -> tuple[Tensor, ...]:
        outs = []
        for i, (patch_embed, layers, norm) in enumerate(self.layers):
            x, hw_shape = patch_embed(x)
            # Python ints even under torch.jit tracing (PatchEmbed returns traced 0-dim tensors);
            # symbolic sizes under torch.export, so that ONNX export can keep H, W dynamic.
            if not torch.compiler.is_compiling():
                hw_shape = (int(hw_shape[0]), int(hw_shape[1]))
            for layer in layers:
                x = layer(x, hw_shape)
            x = nlc_to_nchw(norm(x), hw_shape)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)
