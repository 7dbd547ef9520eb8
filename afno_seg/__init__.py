"""afno_seg: Fourier token mixers in SegFormer on the OpenMMLab stack.

Importing the package registers everything: the token mixers and the MixerMiT backbone in both
MMSegmentation's and MMPretrain's ``MODELS``, the SegFormer head fused at low resolution
(:mod:`afno_seg.decode_heads`) in mmseg's, the data checks in mmseg's ``TRANSFORMS``, and the
engine extensions (hooks, CPU autocast optim wrapper, CPU DDP, the ``'atomic_local'`` file
backend that the checkpoint hook asks for by name) in mmengine's registries. One registration
replaces mmengine's handler of local paths, a stricter form of it: the checkpoint loader (data
only, :mod:`afno_seg.engine.checkpoint`). Nothing else changes on import: the CPU allocator
setting and a CPU process group come with :func:`afno_seg.engine.build_runner`, the stop-signal
handlers with training (given back when it ends). The experiment drivers
(:mod:`afno_seg.experiments`) and the cost library (:mod:`afno_seg.analysis`) are not imported.
Ignored by their text, first: setuptools' pkg_resources deprecation (setuptools<81 is pinned),
mmseg's ``build_loss``/``avg_non_ignore`` notices and its hook saying ``draw=False`` draws nothing.
"""
import warnings

warnings.filterwarnings('ignore', category=UserWarning, message='pkg_resources is deprecated as an '
                        'API|``build_loss`` would be deprecated soon|Default ``avg_non_ignore``|'
                        'The draw is False')

from . import backbones, datasets, decode_heads, engine, mixers  # noqa: E402, F401

__version__ = '0.1.0'
