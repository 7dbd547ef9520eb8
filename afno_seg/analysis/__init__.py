"""Cost analysis on top of mmengine's ``FlopAnalyzer``: FLOP handles for FFTs, complex products
and attention (:mod:`.flops`), the per-stage / per-component breakdown of a segmentor
(:mod:`.breakdown`, :mod:`.report`), the mixer complexity sweep (:mod:`.complexity`), the
reconciliation with the AFNO paper's numbers (:mod:`.reconcile`) and the cost of a config
(:mod:`.config_cost`). See ``docs/flops.md``.

This is the library other code imports (the FLOP tools, the tests); the drivers that run
experiments (study, spectra, benchmarks) are in :mod:`afno_seg.experiments`. Importable on its own
(``import afno_seg.analysis``).
"""
from .breakdown import analyze_segmentor
from .flops import (
                    FLOP_HANDLES,
                    FLOPS_PER_MAC,
                    build_flop_analyzer,
                    count_mixer_flops,
                    fft_op_flops,
                    inline_autograd_functions,
                    is_fft_op,
                    shape_only_attention,
                    tracing_for_flops,
)
from .report import breakdown_markdown, summarize, write_report

__all__ = [
    'FLOP_HANDLES', 'FLOPS_PER_MAC', 'analyze_segmentor', 'breakdown_markdown',
    'build_flop_analyzer', 'count_mixer_flops', 'fft_op_flops', 'inline_autograd_functions',
    'is_fft_op', 'shape_only_attention', 'summarize', 'tracing_for_flops', 'write_report'
]
