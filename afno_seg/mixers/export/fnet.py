"""FNet's ``Re(F_H F_W F_C X)`` of channels-last tokens as real matmuls (its ``matmul`` form).

Three products over outer axes, the first of real input, the last computing the real part only;
axes of :func:`.dft.use_factored` sizes factored as in :mod:`.dft`. Values equal ``torch.fft``
within float rounding (``tests/test_dft_matmul.py``).
"""
from torch import Tensor

from .dft import _get, axis_factor

__all__ = ['fnet_real']


def _axis(x: Tensor, n: int, factor: tuple[int, int] | None, real: bool) -> Tensor:
    """The DFT along n of a real ``(P, n, N)`` or a stacked ``(P, 2, n, N)`` -> ``(P, n, 2, N)``,
    rows ``(k1, k2)`` when factored: ``2n`` (real) or ``4n`` multiply-adds a point, factored
    ``2 n1 + 4 n2`` or ``4 (n1 + n2)``."""
    batch, cols = x.shape[0], x.shape[-1]
    n1, n2 = factor or (n, 1)
    out = _get('real_rows' if real else 'f1', n, n1, n2, x) @ x.reshape(batch, -1, n2 * cols)
    if factor is not None:
        out = _get('f2_rows', n, n1, n2, x) @ out.reshape(batch, n1, 2 * n2, cols)
    return out.reshape(batch, n, 2, cols)


def _fnet_plan(shape: tuple[int, ...], factored: bool | None, layout: str | None = None):
    """``(layout, axes, factor of the real axis, factor of the complex one)``; ``layout`` None:
    the one with fewer multiply-adds a point, ``'last'`` (axes H real, W complex, C last) or
    ``'first'`` (C real, H complex, W last)."""
    _, height, width, channels = shape

    def factor(n: int, axis: str, real: bool) -> tuple[int, int] | None:
        split = axis_factor(n, axis, factored)
        return split[::-1] if real and split else split  # real: 2 n1 + 4 n2, the larger first

    def cost(n: int, split, real: bool) -> int:
        if split is None:
            return (2 if real else 4) * n
        return 2 * split[0] + 4 * split[1] if real else 4 * sum(split)

    plans = {'last': ((height, width, channels), factor(height, 'h', True),
                      factor(width, 'fnet_w', False)),
             'first': ((channels, height, width), factor(channels, 'c', True),
                       factor(height, 'fnet_h', False))}
    if layout is None:
        layout = min(plans, key=lambda key: cost(plans[key][0][0], plans[key][1], True) +
                     cost(plans[key][0][1], plans[key][2], False) + 2 * plans[key][0][2])
    return layout, *plans[layout]


def fnet_real(grid: Tensor, transform: str = 'fourier', factored: bool | None = None,
              layout: str | None = None) -> Tensor:
    """FNet's ``Re(F_H F_W F_C X)`` (or ``Re - Im``, ``transform='hartley'``) of a channels-last
    real grid ``(B, H, W, C)``, orthonormal.

    Three products over outer axes, the first of real input, the last computing the real part
    only (``2n`` multiply-adds a point), the factored axes' outputs in the order ``(k1, k2)``
    until a transpose restores the natural one at the end. Two layouts, the cheaper taken
    (:func:`_fnet_plan`): ``'last'`` keeps the tokens' layout (H real, W complex, C last), so the
    channel axis is never factored (small C, large grids); ``'first'`` transposes to channels
    first and back (2-D transposes, onnxruntime's fast ones) so that C is the real, factored
    axis, then H, then W last (wide C).

    Args:
        grid (Tensor): ``(B, H, W, C)``.
        transform (str): ``'fourier'`` or ``'hartley'``. Default: 'fourier'.
        factored (bool, optional): Force (True) or forbid (False) factoring; None:
            :func:`.dft.use_factored`. Default: None.
        layout (str, optional): ``'last'`` or ``'first'``; None: the cheaper. Default: None.
    """
    batch, height, width, channels = grid.shape
    plan, axes, real_factor, inner_factor = _fnet_plan(grid.shape, factored, layout)
    if plan == 'last':  # (B, H, W C) -> (B H, 2, W, C) -> (B, H, W, 2 C)
        y = _axis(grid.reshape(batch, height, width * channels), height, real_factor, True)
        z = _axis(y.reshape(batch * height, 2, width, channels), width, inner_factor, False)
    else:  # (B, C, H W) -> (B C, 2, H, W) -> (B, C, H, 2 W)
        x = grid.reshape(batch, height * width, channels).transpose(1, 2)
        y = _axis(x, channels, real_factor, True)
        z = _axis(y.reshape(batch * channels, 2, height, width), height, inner_factor, False)
    out = z.reshape(batch, axes[0], axes[1], 2 * axes[2]) @ _get(f'real_part_{transform}',
                                                                  axes[2], 0, 0, z)
    # the factored axes from (k1, k2) to k = k1 + n1 k2 (a transpose of runs of the last axis)
    first_axes = real_factor or (axes[0], )
    out = out.reshape(batch, *first_axes, *(inner_factor or (axes[1], )), axes[2])
    if real_factor or inner_factor:
        split, last = len(first_axes), out.dim() - 1
        out = out.permute(0, *range(split, 0, -1), *range(last - 1, split, -1), last)
    if plan == 'last':
        return out.reshape(grid.shape)
    # back to channels-last: a 2-D transpose (onnxruntime's fast one, unlike a 6-D one)
    return out.reshape(batch, channels, height * width).transpose(1, 2).reshape(grid.shape)
