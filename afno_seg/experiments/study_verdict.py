"""Does a row of the mixer study differ from ESA beyond seed noise? Seeds paired by number.

Runs of the same seed number share the data order (the sampler's seed), so their mIoUs move
together; the per-seed difference ``d_s = mIoU(row, s) - mIoU(ESA, s)`` removes that shared part.
Over the ``n`` seeds both rows have, the two-sided paired t interval at ``confidence`` is
``mean(d) +- t_{(1 + confidence) / 2, n - 1} * std(d) / sqrt(n)`` (``std`` with ``n - 1``); the
verdict is "above ESA" / "below ESA" when the interval excludes 0, else "within seed noise".
"""
import math
import statistics
from dataclasses import dataclass

__all__ = ['PairedDifference', 'paired_difference', 'verdict']


@dataclass(frozen=True)
class PairedDifference:
    """Mean of the paired differences, its interval (nan below 2 pairs) and the pair count."""
    mean: float
    low: float
    high: float
    pairs: int


def paired_difference(row: dict[int, float], reference: dict[int, float],
                      confidence: float = 0.95) -> PairedDifference:
    """Paired t interval of ``row - reference`` over the seeds (keys) both have.

    Args:
        row (dict[int, float]): mIoU by seed number.
        reference (dict[int, float]): The reference row's mIoU by seed number.
        confidence (float): Two-sided confidence of the interval. Default: 0.95.

    Returns:
        PairedDifference: nan everywhere without a common seed; mean only with one.
    """
    diffs = [row[seed] - reference[seed] for seed in sorted(set(row) & set(reference))]
    if not diffs:
        return PairedDifference(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return PairedDifference(mean, math.nan, math.nan, 1)
    from scipy.stats import t  # mmsegmentation's dependency
    half = t.ppf((1 + confidence) / 2, len(diffs) - 1) * statistics.stdev(diffs) / \
        math.sqrt(len(diffs))
    return PairedDifference(mean, mean - half, mean + half, len(diffs))


def verdict(difference: PairedDifference, reference: str = 'ESA') -> str:
    """"above ESA", "below ESA", "within seed noise", or why there is no verdict."""
    if difference.pairs < 2:
        return f'no verdict ({difference.pairs} seed{"" if difference.pairs == 1 else "s"} ' \
               f'paired with {reference})'
    if difference.low > 0:
        return f'above {reference}'
    if difference.high < 0:
        return f'below {reference}'
    return 'within seed noise'
