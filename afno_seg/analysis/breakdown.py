"""Per-component cost of a segmentor: FLOPs and parameters per backbone stage, decode head, total.

One ``torch.jit`` trace of the whole model (batch 1) through
:func:`~afno_seg.analysis.flops.build_flop_analyzer`; every op is attributed to the module that ran
it. MiT-style backbones (``MixerMiT`` and mmseg's ``MixVisionTransformer`` share the module tree,
:func:`~afno_seg.backbones.mit_checkpoint.mit_position`) get per stage the rows of
:data:`COMPONENTS`: the strided patch-embedding conv, the mixer's FFT ops and the rest of it,
Mix-FFN, and every norm of the stage (mmengine's per-element estimates); then ``decode head`` and
``total``. Other backbones get one ``backbone`` row. Parameters follow the same split. Mixers with
an analytic ``flops(hw_shape)`` also get it summed per stage, beside the traced count.
"""
from collections import Counter, defaultdict

import torch
from mmengine.analysis import parameter_count
from mmengine.model.utils import revert_sync_batchnorm
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from ..backbones.mit_checkpoint import mit_position
from .flops import FLOPS_PER_MAC, NORM_OPS, build_flop_analyzer, is_fft_op, tracing_for_flops

__all__ = ['analyze_segmentor', 'COMPONENTS']

COMPONENTS = ('patch embedding', 'mixer: FFT', 'mixer: rest', 'FFN', 'norms')
_NORM_MODULES = (nn.LayerNorm, nn.GroupNorm, _BatchNorm, nn.modules.instancenorm._InstanceNorm)
_PART_NAMES = dict(backbone='backbone', neck='neck', decode_head='decode head',
                   auxiliary_head='auxiliary head')


class _TensorForward(nn.Module):
    """``decode_head(extract_feat(x))``: a segmentor's ``mode='tensor'`` forward, with the head
    called through ``__call__`` so its ops (resizes included) are attributed to it."""

    def __init__(self, segmentor: nn.Module) -> None:
        super().__init__()
        self.segmentor = segmentor

    def forward(self, inputs: Tensor) -> Tensor:
        return self.segmentor.decode_head(self.segmentor.extract_feat(inputs))


def _component(module_name: str, op: str) -> tuple[str, str]:
    """``(group, component)`` of an op run by ``module_name`` (names relative to the segmentor)."""
    at = mit_position(module_name) if module_name.startswith('backbone.') else None
    if at is None:
        return _PART_NAMES.get(module_name.split('.')[0], 'other'), 'all'
    group, sub = f'stage {at.stage + 1}', at.part
    if op in NORM_OPS or at.slot == 2 or sub in ('norm1', 'norm2'):
        return group, 'norms'
    if at.slot == 0:
        return group, 'patch embedding'
    if sub == 'attn':
        return group, 'mixer: FFT' if is_fft_op(op) else 'mixer: rest'
    if sub == 'ffn':
        return group, 'FFN'
    return group, 'other'


def _leaf_counts(analyzer, prefix: str) -> dict[str, Counter]:
    """Counts of each module's own ops (descendants' ops removed), keyed by name minus prefix."""
    counts = analyzer.by_module_and_operator()
    children = defaultdict(list)
    for name in filter(None, counts):  # the root ('') is no one's child
        children[name.rpartition('.')[0]].append(name)
    leaf = {}
    for name, counter in counts.items():
        own = Counter(counter)
        for child in children[name]:
            own.subtract(counts[child])
        own = Counter({op: v for op, v in own.items() if abs(v) > 1e-9})
        if own:
            leaf[name.removeprefix(prefix)] = own
    return leaf


def _hook_mixers(model: nn.Module) -> tuple[dict, list]:
    """Forward pre-hooks on the mixers: record each one's grid and pass it on as Python ints.

    Under ``torch.jit`` tracing, the ``hw_shape`` that ``PatchEmbed`` derives from ``x.shape`` holds
    0-dim tensors, which mixers doing integer arithmetic on the grid (AFNO's band) reject; the
    trace is for one fixed input size anyway, so the grid is frozen to constants here.
    """
    grids, handles = {}, []
    for name, module in model.backbone.named_modules():
        at = mit_position(name)
        if at is not None and at.slot == 1 and at.part == 'attn' and not at.rest:

            def hook(mod, args, _name=name):
                grids[_name] = tuple(int(v) for v in args[1])
                return (args[0], grids[_name], *args[2:])

            handles.append(module.register_forward_pre_hook(hook))
    return grids, handles


def _param_components(model: nn.Module) -> dict[tuple[str, str], int]:
    counts = defaultdict(int)
    for module_name, module in model.named_modules():
        own = sum(p.numel() for p in module.parameters(recurse=False))
        if not own:
            continue
        group, component = _component(module_name, '')  # a mixer's go to 'mixer: rest'
        if isinstance(module, _NORM_MODULES) and group.startswith('stage'):
            component = 'norms'
        counts[(group, component)] += own
    return counts


def analyze_segmentor(model: nn.Module, image_hw: tuple[int, int], attention_stand_in: bool = True,
                      device: str | torch.device = 'cpu') -> dict:
    """Trace ``model`` on one ``3 x H x W`` image and split its cost by stage and component.

    Args:
        model (nn.Module): An mmseg segmentor (``extract_feat`` + ``decode_head``).
        image_hw (tuple[int, int]): Input ``(H, W)``.
        attention_stand_in (bool): Trace attention through :func:`shape_only_attention` (same
            count, no arithmetic; full self-attention at 1024 x 1024 would take minutes on a CPU).
            Default: True.
        device (str | torch.device): Where to run the trace. Default: 'cpu'.

    Returns:
        dict: ``rows`` (group, component, MACs, FLOPs, params, analytic FLOPs, ops), ``total``
        (MACs, FLOPs, params), ``unsupported_ops`` (ops counted as zero), ``stages`` (grid,
        channels, layers and mixer types of each backbone stage).
    """
    model = revert_sync_batchnorm(model).to(device).eval()
    analyzer = build_flop_analyzer(_TensorForward(model),
                                   (torch.randn(1, 3, *image_hw, device=device), ))
    grids, handles = _hook_mixers(model)
    try:
        with tracing_for_flops(attention_stand_in):
            leaf = _leaf_counts(analyzer, 'segmentor.')
    finally:
        for handle in handles:
            handle.remove()

    macs, ops = defaultdict(float), defaultdict(Counter)
    for module_name, counter in leaf.items():
        for op, value in counter.items():
            key = _component(module_name, op)
            macs[key] += value
            ops[key][op] += value
    params = _param_components(model)
    stages, analytic = {}, defaultdict(lambda: defaultdict(float))
    for name, grid in grids.items():
        group, mixer = f'stage {mit_position(name).stage + 1}', model.backbone.get_submodule(name)
        stage = stages.setdefault(group, dict(
            grid=list(grid), mixers={}, channels=getattr(mixer, 'embed_dims', None), layers=0))
        kind = type(mixer).__name__
        stage['mixers'][kind] = stage['mixers'].get(kind, 0) + 1
        stage['layers'] += 1
        if callable(getattr(mixer, 'flops', None)):  # mmseg's attention has none
            for term, value in mixer.flops(grid).items():
                analytic[group]['mixer: FFT' if term == 'fft' else 'mixer: rest'] += value

    rows, keys = [], {*macs, *params}
    for group in sorted({g for g, _ in keys}, key=_group_order):
        components = sorted({c for g, c in keys if g == group} - set(COMPONENTS))
        if group.startswith('stage'):
            components = [*COMPONENTS, *components]
        for component in components:
            key = (group, component)
            row = dict(group=group, component=component, macs=macs.get(key, 0.0),
                       flops=FLOPS_PER_MAC * macs.get(key, 0.0), params=params.get(key, 0),
                       ops={op: FLOPS_PER_MAC * v for op, v in sorted(ops[key].items())})
            if group in analytic and component.startswith('mixer'):
                row['analytic_flops'] = analytic[group][component]
            rows.append(row)
    total_macs = analyzer.total()
    return dict(
        image_hw=list(image_hw), rows=rows,
        total=dict(macs=total_macs, flops=FLOPS_PER_MAC * total_macs,
                   params=parameter_count(model)['']),
        unsupported_ops=dict(sorted(analyzer.unsupported_ops().items())),
        stages=dict(sorted(stages.items(), key=lambda kv: _group_order(kv[0]))),
        attention_stand_in=attention_stand_in)


def _group_order(group: str) -> tuple:
    if group.startswith('stage'):
        return (0, int(group.split()[1]))
    return (1 if group == 'backbone' else 2 if group == 'neck' else 3, group)
