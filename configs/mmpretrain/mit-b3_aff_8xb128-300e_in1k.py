# ImageNet-1K pretraining of the SegFormer-B3 encoder with AFF in every stage (8 blocks, ReLU,
# soft-shrink 0.01, every frequency kept); fine-tunes configs/segformer_aff_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/aff.py'
]
model = dict(backbone=dict(mixers={{_base_.aff_mixer}}))
