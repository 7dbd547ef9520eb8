# Long-Short attention (Transformer-LS): 8x8 windows with half-window halos (16x16 keys) plus 32
# dynamically projected keys per head, DualLN. AFNO paper, Table 4: 80.5 mIoU.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/ls.py'
]
model = dict(backbone=dict(mixers={{_base_.ls_mixer}}))
