# ImageNet-1K pretraining of the hybrid SegFormer-B3 encoder: AFNO-100% in stages 1-2, efficient
# self-attention in stages 3-4; fine-tunes configs/segformer_afno-esa-hybrid_b3_cityscapes.py.
_base_ = ['./_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py']
model = dict(
    backbone=dict(mixers=[
        dict(type='AFNOMixer', num_blocks=8, sparsity_threshold=0.01),
        dict(type='AFNOMixer', num_blocks=8, sparsity_threshold=0.01),
        dict(type='EfficientSelfAttentionMixer'),
        dict(type='EfficientSelfAttentionMixer'),
    ]))
