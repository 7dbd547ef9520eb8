# ImageNet-1K pretraining of the SegFormer-B3 encoder with full self-attention (3136 tokens in
# stage 1 of a 224 crop); fine-tunes configs/segformer_sa_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/sa.py'
]
model = dict(backbone=dict(mixers={{_base_.sa_mixer}}))
