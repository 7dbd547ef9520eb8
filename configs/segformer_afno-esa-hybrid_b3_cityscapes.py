# Hybrid: AFNO-100% in the high-resolution stages 1-2 (where attention is costliest), SegFormer's
# efficient self-attention in stages 3-4.
_base_ = './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py'
model = dict(
    backbone=dict(mixers=[
        dict(type='AFNOMixer', num_blocks=8, sparsity_threshold=0.01),
        dict(type='AFNOMixer', num_blocks=8, sparsity_threshold=0.01),
        dict(type='EfficientSelfAttentionMixer'),
        dict(type='EfficientSelfAttentionMixer'),
    ]))
