"""afno_seg: Fourier token mixers in SegFormer on the OpenMMLab stack.

Importing the package registers everything: the token mixers and the MixerMiT backbone (mmseg's
and mmpretrain's ``MODELS``), the SegFormer head fused at low resolution, the data checks, the
engine extensions (hooks, optim wrappers, CPU DDP, the ``'atomic_local'`` file backend) and, in
place of mmengine's, a loader of checkpoints as data only (:mod:`afno_seg.engine.checkpoint`).
Nothing else changes on import (the CPU allocator, a process group and the stop-signal handlers
come with :func:`afno_seg.engine.build_runner` and training) but known notices ignored by text:
setuptools' pkg_resources deprecation, mmseg's ``build_loss``/``avg_non_ignore``/``draw=False``.
The experiment drivers (:mod:`afno_seg.experiments`) and :mod:`afno_seg.analysis` are not imported.
"""
import warnings

warnings.filterwarnings('ignore', category=UserWarning, message='pkg_resources is deprecated as an '
                        'API|``build_loss`` would be deprecated soon|Default ``avg_non_ignore``|'
                        'The draw is False')

from . import backbones, datasets, decode_heads, engine, mixers  # noqa: E402, F401

__version__ = '0.1.0'
