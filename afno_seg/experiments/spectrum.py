"""What the token mixers of a trained backbone do in the frequency domain.

Measured with forward hooks on every mixer (nothing in a mixer is changed or wrapped):

* **radial energy spectra** of the tokens entering and leaving each mixer: the orthonormal
  ``rfft2`` of each channel over the token grid, power averaged over channels, images and the
  modes of each radial band of ``r = sqrt((k_h / H)^2 + (k_w / W)^2)`` (cycles per token; the
  last band also holds the corners beyond ``r = 0.5``; a conjugate pair's column counts twice).
* **AFNO's soft-shrink sparsity** (Guibas et al. 2021): the mixer's ``mode_mlp`` re-run on the
  captured input's band, with its threshold and with 0. Sparsity = fraction of the coefficients
  the shrink zeroes (real and imaginary parts apart for ``shrink='split'``), over the modes the
  mixer computes; per radial band also the energy kept, ``sum |shrunk|^2 / sum |unshrunk|^2``.
  The re-run must reproduce the hooked output, so a mixer whose math drifts from its
  ``mode_mlp`` fails loudly instead of being measured wrongly.
* **GFN filters**: ``|K|`` of each GlobalFilterMixer at its stored grid and resampled to another.
"""
import copy
import math
from collections import defaultdict

import torch
from torch import Tensor

from ..backbones.mit_checkpoint import mit_position
from ..mixers.afno import AFNOMixer
from ..mixers.base import TokenMixer
from ..mixers.fast.transforms import hermitian_column_weight, spectrum_to_grid, tokens_to_spectrum
from ..mixers.gfn import GlobalFilterMixer
from ..mixers.spectral import SpectralBand, grid_to_tokens, signed_frequencies, tokens_to_grid

__all__ = ['MixerProbe', 'afno_shrink_stats', 'gfn_filters', 'mixer_layers', 'radial_band_index',
           'radial_energy']


def radial_band_index(hw_shape: tuple[int, int], num_bands: int) -> Tensor:
    """Band of each mode of an ``rfft2`` half spectrum ``(H, W // 2 + 1)`` (long tensor): the
    bands split [0, 0.5] cycles per token equally."""
    height, width = hw_shape
    rows = signed_frequencies(height).double().view(-1, 1) / height
    cols = torch.arange(width // 2 + 1, dtype=torch.float64).view(1, -1) / width
    radius = (rows ** 2 + cols ** 2).sqrt()
    return (radius / 0.5 * num_bands).floor().long().clamp_max(num_bands - 1)


def _mode_weight(hw_shape: tuple[int, int]) -> Tensor:
    """How many modes of the full spectrum each half-spectrum column stands for (1 or 2)."""
    return 1.0 / hermitian_column_weight(hw_shape[1], dtype=torch.float64)


def _band_sums(values: Tensor, bands: Tensor, num_bands: int, weight: Tensor | float = 1.0
               ) -> Tensor:
    """Weighted sum of ``values (..., rows, cols)`` over all leading axes, per band."""
    per_mode = (values.double() * weight).reshape(-1, *bands.shape).sum(0)
    return torch.zeros(num_bands, dtype=torch.float64).index_add_(0, bands.flatten(),
                                                                  per_mode.flatten())


def radial_energy(tokens: Tensor, hw_shape: tuple[int, int], num_bands: int) -> Tensor:
    """Mean power per mode and channel in each radial band of tokens ``(B, H*W, C)`` (NaN for a
    band without modes, e.g. the fine bands of a small grid)."""
    spectrum = torch.fft.rfft2(tokens_to_grid(tokens.double(), hw_shape).permute(0, 3, 1, 2),
                               norm='ortho')
    bands = radial_band_index(hw_shape, num_bands)
    weight = _mode_weight(hw_shape)
    power = _band_sums(spectrum.abs() ** 2, bands, num_bands, weight)
    modes = _band_sums(torch.ones(bands.shape), bands, num_bands, weight)
    energy = power / (modes * tokens.shape[0] * tokens.shape[-1]).clamp_min(1)
    return torch.where(modes > 0, energy, torch.full_like(energy, math.nan))


def afno_shrink_stats(mixer: AFNOMixer, x: Tensor, hw_shape: tuple[int, int], num_bands: int,
                      output: Tensor | None = None) -> dict:
    """Zeroed coefficients and energy kept by an AFNO mixer's soft-shrink on tokens ``x``
    ``(B, H*W, C)``: ``zeros``, ``total`` (counts over the computed modes) and per radial band
    ``band_zeros``, ``band_total``, ``band_energy_pre``, ``band_energy_post`` (lists of floats).
    A RuntimeError when the re-run does not reproduce ``output``, the mixer's output, if given."""
    hw_shape = tuple(hw_shape)
    with torch.no_grad():
        x32 = x.detach().float()
        band = SpectralBand.fraction(hw_shape, mixer.hard_thresholding_fraction)
        modes = band.gather(tokens_to_spectrum(x32, hw_shape))
        shrunk = mixer.mode_mlp(modes)
        unshrunk_mixer = copy.copy(mixer)  # shares the weights; only the threshold differs
        unshrunk_mixer.sparsity_threshold = 0.0
        unshrunk = unshrunk_mixer.mode_mlp(modes)
        if output is not None:
            rebuilt = grid_to_tokens(tokens_to_grid(x32, hw_shape) +
                                     spectrum_to_grid(band.scatter(shrunk), hw_shape))
            scale = float(output.detach().float().abs().max()) + 1e-12
            error = float((rebuilt - output.detach().float()).abs().max()) / scale
            if error > 1e-3:
                raise RuntimeError(f'AFNO analysis does not reproduce the mixer output (relative '
                                   f'error {error:.2e}); AFNOMixer.mode_mlp no longer matches its '
                                   'forward, so the sparsity would be wrong')
    bands = band.gather(radial_band_index(hw_shape, num_bands))
    weight = band.gather(_mode_weight(hw_shape).expand(hw_shape[0], -1))
    if mixer.shrink == 'split':
        zero = (torch.view_as_real(shrunk) == 0).double().sum(-1)  # zeros among (re, im)
        parts = 2
    else:
        zero, parts = (shrunk == 0).double(), 1
    band_zeros = _band_sums(zero, bands, num_bands)
    band_total = _band_sums(torch.full_like(zero, float(parts)), bands, num_bands)
    return dict(
        zeros=float(zero.sum()), total=float(zero.numel() * parts),
        band_zeros=band_zeros.tolist(), band_total=band_total.tolist(),
        band_energy_pre=_band_sums(unshrunk.abs() ** 2, bands, num_bands, weight).tolist(),
        band_energy_post=_band_sums(shrunk.abs() ** 2, bands, num_bands, weight).tolist())


def mixer_layers(model: torch.nn.Module) -> list[tuple[str, int, int, TokenMixer]]:
    """``(name, stage, layer, mixer)`` of every token mixer (stage and layer from MiT's names
    ``layers.{stage}.1.{layer}.attn``, 1-based stage; -1 where the name has another form)."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, TokenMixer):
            at = mit_position(name)
            mit = at is not None and at.slot == 1 and at.part == 'attn' and not at.rest
            found.append((name, at.stage + 1 if mit else -1, at.layer if mit else -1, module))
    return found


class MixerProbe:
    """Forward hooks on every mixer of ``model`` accumulating spectra and AFNO statistics.

    Use as a context manager around forward passes; read :meth:`results` after.

    Args:
        model (nn.Module): Any module containing :class:`TokenMixer` s.
        num_bands (int): Radial bands. Default: 16.
    """

    def __init__(self, model: torch.nn.Module, num_bands: int = 16) -> None:
        self.layers = mixer_layers(model)
        self.num_bands = num_bands
        self.sums = defaultdict(lambda: defaultdict(lambda: 0.0))  # per mixer, calls included
        self.grids, self.handles = {}, []

    def __enter__(self) -> 'MixerProbe':
        for name, _, _, mixer in self.layers:
            self.handles.append(mixer.register_forward_hook(self._hook(name), with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _hook(self, name: str):
        def hook(module, args, kwargs, output):
            x = args[0]
            hw_shape = tuple(int(v) for v in (args[1] if len(args) > 1 else kwargs['hw_shape']))
            sums = self.sums[name]
            sums['energy_in'] += radial_energy(x.detach(), hw_shape, self.num_bands)
            sums['energy_out'] += radial_energy(output.detach(), hw_shape, self.num_bands)
            if isinstance(module, AFNOMixer):
                stats = afno_shrink_stats(module, x, hw_shape, self.num_bands, output)
                for key, value in stats.items():
                    sums[key] += torch.as_tensor(value, dtype=torch.float64)
            sums['calls'] += 1
            self.grids[name] = hw_shape
        return hook

    def results(self) -> dict:
        """Per mixer layer: spectra in/out; for AFNO layers sparsity, per band sparsity and energy
        kept; plus the AFNO summary (mean sparsity, per stage)."""
        layers, afno = [], []
        for name, stage, layer, mixer in self.layers:
            if name not in self.sums:
                continue
            sums = self.sums[name]
            layers.append(dict(name=name, stage=stage, layer=layer, type=type(mixer).__name__,
                               grid=list(self.grids[name]),
                               energy_in=(sums['energy_in'] / sums['calls']).tolist(),
                               energy_out=(sums['energy_out'] / sums['calls']).tolist()))
            if isinstance(mixer, AFNOMixer):
                afno.append(dict(
                    name=name, stage=stage, layer=layer, threshold=mixer.sparsity_threshold,
                    sparsity=float(sums['zeros'] / sums['total']),
                    band_sparsity=_ratio(sums['band_zeros'], sums['band_total']),
                    band_energy_kept=_ratio(sums['band_energy_post'], sums['band_energy_pre']),
                    energy_kept=float(sums['band_energy_post'].sum() /
                                      sums['band_energy_pre'].sum())))
        per_stage = defaultdict(list)
        for entry in afno:
            per_stage[entry['stage']].append(entry['sparsity'])
        summary = None if not afno else dict(
            layers=afno, thresholds=sorted({e['threshold'] for e in afno}),
            sparsity_mean=sum(e['sparsity'] for e in afno) / len(afno),
            sparsity_per_stage={str(k): sum(v) / len(v) for k, v in sorted(per_stage.items())})
        return dict(num_bands=self.num_bands,
                    band_edges=[0.5 * i / self.num_bands for i in range(self.num_bands + 1)],
                    layers=layers, afno=summary)


def _ratio(numerator: Tensor, denominator: Tensor) -> list[float]:
    return [float(n / d) if d > 0 else math.nan for n, d in zip(numerator, denominator)]


def gfn_filters(model: torch.nn.Module, resample_factor: float = 2.0,
                num_bands: int = 16) -> list[dict]:
    """``|K|`` of every GlobalFilterMixer at its stored grid and resampled.

    Returns:
        list[dict]: per layer ``name``, ``stage``, ``layer``, ``base_grid``, ``resampled_grid``,
        ``stored`` and ``resampled`` (``(H, W // 2 + 1, C)`` float tensors of ``|K|``) and
        ``radial_mean`` (channel-mean ``|K|`` per radial band at the stored grid).
    """
    out = []
    for name, stage, layer, mixer in mixer_layers(model):
        if not isinstance(mixer, GlobalFilterMixer):
            continue
        base = tuple(mixer.base_hw_shape)
        other = tuple(max(1, round(n * resample_factor)) for n in base)
        with torch.no_grad():
            stored = mixer.filter_at(base).abs().float()
            resampled = mixer.filter_at(other).abs().float()
        bands = radial_band_index(base, num_bands)
        out.append(dict(name=name, stage=stage, layer=layer, base_grid=list(base),
                        resampled_grid=list(other), stored=stored, resampled=resampled,
                        radial_mean=_ratio(_band_sums(stored.mean(-1), bands, num_bands),
                                           _band_sums(torch.ones(bands.shape), bands, num_bands))))
    return out
