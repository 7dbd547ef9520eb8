"""Experiment drivers, apart from the cost library :mod:`afno_seg.analysis`: the mixer study
(``study_plan``, ``study``, ``study_jobs``, ``study_table``; ``tools/analysis/mixer_study.py``),
spectra and receptive fields of trained mixers (``spectrum*``, ``receptive_field``;
``tools/analysis/spectrum.py``) and the benchmarks (``benchmarking``, ``mixer_benchmark*``;
``tools/analysis/benchmark_mixers.py``, ``benchmark_model.py``).

Nothing is imported here (nor by ``import afno_seg``): each CLI imports the modules it runs.
"""
