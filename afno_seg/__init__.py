"""afno_seg: Fourier token mixers in SegFormer on the OpenMMLab stack.

Importing the package registers everything: the token mixers and the MixerMiT backbone in both
MMSegmentation's and MMPretrain's ``MODELS``, the data checks in mmseg's ``TRANSFORMS``, and the
engine extensions (checkpoint loading on torch >= 2.6, CPU autocast optim wrapper, CPU DDP) in
mmengine's registries. Configs pull it in with
``custom_imports = dict(imports=['afno_seg'], allow_failed_imports=False)``.
"""
from . import backbones, datasets, engine, mixers  # noqa: F401

__version__ = '0.1.0'
