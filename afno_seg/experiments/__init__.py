"""Experiment drivers: what produces the study, spectrum and benchmark results, as opposed to the
cost library in :mod:`afno_seg.analysis` that other code imports.

* the mixer study (the AFNO paper's Table 4): :mod:`.study_plan` (rows, seeds, derived configs),
  :mod:`.study` (train / evaluate / cost by running the tools), :mod:`.study_table` (table, plots);
  CLI ``tools/analysis/mixer_study.py``;
* spectra of trained mixers: :mod:`.spectrum` (hooks, AFNO sparsity, GFN filters),
  :mod:`.receptive_field`, :mod:`.spectrum_run`, :mod:`.spectrum_plots`; CLI
  ``tools/analysis/spectrum.py``;
* benchmarks: :mod:`.benchmarking` (interleaved timing, memory, ratios), :mod:`.mixer_benchmark`
  and :mod:`.mixer_benchmark_report`; CLIs ``tools/analysis/benchmark_mixers.py`` and
  ``benchmark_model.py``.

Nothing is imported here (and ``import afno_seg`` does not import this package): each CLI imports
the modules it runs.
"""
