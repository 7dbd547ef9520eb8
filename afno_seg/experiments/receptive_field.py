"""Effective receptive field (ERF) of a backbone's feature maps.

Luo, Li, Urtasun, Zemel. "Understanding the Effective Receptive Field in Deep Convolutional Neural
Networks." NeurIPS 2016 (arXiv:1701.04128): the ERF of an output unit is its gradient with respect
to the input image. A mixer that only mixes locally gives an ERF that is exactly zero outside the
reach of the layers' kernels; a global mixer (Fourier or attention) spreads it over the image.
"""
import math
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import Tensor

__all__ = ['effective_receptive_fields', 'erf_radius']


def effective_receptive_fields(features: Callable[[Tensor], Sequence[Tensor]],
                               images: Iterable[Tensor], names: Sequence[str],
                               indices: Sequence[int]) -> dict[str, Tensor]:
    """ERF maps of the outputs ``indices`` of ``features``, averaged over ``images``.

    ``features(x (1, 3, H, W))`` returns a sequence of ``(1, C_i, h_i, w_i)`` maps (e.g. a
    backbone's stages, run in its current mode: use eval); ``images`` are normalised inputs
    ``(1, 3, H, W)``. Returns ``names[i] -> (H, W)`` float64 map, the mean over images of
    ``sum_colour |d sum_c out[c, h_i // 2, w_i // 2] / d input|``.
    """
    sums, count = dict.fromkeys(names, 0), 0
    for count, image in enumerate(images, 1):
        x = image.detach().clone().requires_grad_(True)
        outputs = features(x)
        selected = [outputs[i] for i in indices]
        for position, (name, out) in enumerate(zip(names, selected)):
            unit = out[:, :, out.shape[-2] // 2, out.shape[-1] // 2].sum()
            (grad, ) = torch.autograd.grad(unit, x, retain_graph=position < len(selected) - 1)
            sums[name] = sums[name] + grad.abs().sum(dim=(0, 1)).double()
    if not count:
        raise ValueError('effective_receptive_fields needs at least one image')
    return {name: total / count for name, total in sums.items()}


def erf_radius(erf: Tensor, fraction: float) -> float:
    """Radius (input pixels) of the disc around the ERF's mass-weighted centre that holds
    ``fraction`` of its mass."""
    height, width = erf.shape
    total = float(erf.sum())
    if total <= 0:
        return math.nan
    rows = torch.arange(height, dtype=erf.dtype).view(-1, 1)
    cols = torch.arange(width, dtype=erf.dtype).view(1, -1)
    centre = (float((erf * rows).sum()) / total, float((erf * cols).sum()) / total)
    distance = ((rows - centre[0]) ** 2 + (cols - centre[1]) ** 2).sqrt().flatten()
    order = torch.argsort(distance)
    cumulative = torch.cumsum(erf.flatten()[order], 0) / total
    index = int(torch.searchsorted(cumulative, torch.tensor(fraction, dtype=erf.dtype)))
    return float(distance[order][min(index, distance.numel() - 1)])
