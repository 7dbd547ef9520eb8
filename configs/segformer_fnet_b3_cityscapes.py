# FNet: the real part of the 3-D DFT over (H, W, C); no parameters.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/fnet.py'
]
model = dict(backbone=dict(mixers={{_base_.fnet_mixer}}))
