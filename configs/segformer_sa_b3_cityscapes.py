# Full self-attention (no spatial reduction): quadratic in the tokens, 65536 of them in stage 1 of
# a 1024x1024 crop; runs through fused scaled-dot-product attention kernels.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/sa.py'
]
model = dict(backbone=dict(mixers={{_base_.sa_mixer}}))
