# Axial attention: multi-head attention along H, then along W (heads 1, 2, 5, 8).
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/axial.py'
]
model = dict(backbone=dict(mixers={{_base_.axial_mixer}}))
