# ImageNet-1K pretraining of the SegFormer-B3 encoder with PoolFormer's 3x3 pooling in every stage
# (no parameters); fine-tunes configs/segformer_pool_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/pool.py'
]
model = dict(backbone=dict(mixers={{_base_.pool_mixer}}))
