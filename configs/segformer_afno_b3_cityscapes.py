# AFNO-100%: adaptive Fourier neural operator with every frequency kept (8 blocks, soft-shrink
# 0.01). AFNO paper, Table 4: 80.9 mIoU.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/afno.py'
]
model = dict(backbone=dict(mixers={{_base_.afno_mixer}}))
