"""Cost analysis on top of mmengine's ``FlopAnalyzer`` (``docs/flops.md``): FLOP handles for FFTs,
complex products and attention (:mod:`.flops`, :mod:`.tracing`), per-stage breakdowns of a
segmentor (:mod:`.breakdown`, :mod:`.report`) and of a config (:mod:`.config_cost`), the mixer
sweep (:mod:`.complexity`), the B0-B5 scaling table (:mod:`.scaling`), the AFNO paper reconciled
(:mod:`.reconcile`) and the memory of a training step (:mod:`.memory`). Experiment drivers are in
:mod:`afno_seg.experiments`."""
from .breakdown import analyze_segmentor
from .flops import FLOPS_PER_MAC, build_flop_analyzer, count_mixer_flops
from .report import breakdown_markdown, summarize, write_report

__all__ = ['FLOPS_PER_MAC', 'analyze_segmentor', 'breakdown_markdown', 'build_flop_analyzer',
           'count_mixer_flops', 'summarize', 'write_report']
