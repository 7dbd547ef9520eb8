# Baseline: SegFormer-B3's efficient self-attention (spatial reduction 8, 4, 2, 1), i.e. mmseg's
# MixVisionTransformer. AFNO paper, Table 4: 79.7 mIoU.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/esa.py'
]
model = dict(backbone=dict(mixers={{_base_.esa_mixer}}))
