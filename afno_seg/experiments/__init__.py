"""Experiment drivers, apart from the cost library :mod:`afno_seg.analysis`: the mixer study
(``study*``), spectra and receptive fields of trained mixers (``spectrum*``, ``receptive_field``)
and the benchmarks (``benchmarking``, ``mixer_benchmark``), each run by a tool of
``tools/analysis/`` that imports the modules it needs (``import afno_seg`` imports none).
"""
