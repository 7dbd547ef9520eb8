# ImageNet-1K pretraining of the SegFormer-B3 encoder with AFNO-100% in every stage (8 blocks,
# soft-shrink 0.01, all modes kept); fine-tunes configs/segformer_afno_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/afno.py'
]
model = dict(backbone=dict(mixers={{_base_.afno_mixer}}))
