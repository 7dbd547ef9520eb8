# ImageNet-1K pretraining of the SegFormer-B3 encoder with Long-Short attention (2-D sliding
# window + dynamic projection, DualLN); fine-tunes configs/segformer_ls_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/ls.py'
]
model = dict(backbone=dict(mixers={{_base_.ls_mixer}}))
