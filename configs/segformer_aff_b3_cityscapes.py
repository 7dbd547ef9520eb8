# AFF: adaptive frequency filters, AFNO's block MLP (8 blocks, ReLU, soft-shrink 0.01) making a
# mask that multiplies the spectrum, every frequency kept. Huang et al., ICCV 2023.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/aff.py'
]
model = dict(backbone=dict(mixers={{_base_.aff_mixer}}))
