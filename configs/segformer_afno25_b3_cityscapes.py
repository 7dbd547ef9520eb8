# AFNO-25%: AFNO keeping the lowest 25% of the modes along both grid axes (the rest are zeroed and
# skip the spectral MLP).
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/afno25.py'
]
model = dict(backbone=dict(mixers={{_base_.afno25_mixer}}))
