# SegNeXt's multi-scale convolutional attention (mmseg's MSCASpatialAttention: depth-wise 5x5,
# then 1x7/7x1, 1x11/11x1 and 1x21/21x1 strips, GELU, internal residual) in every stage.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/msca.py'
]
model = dict(backbone=dict(mixers={{_base_.msca_mixer}}))
