# ImageNet-1K pretraining of the SegFormer-B3 encoder with AFNO-25% (lowest 25% of the modes along
# both grid axes); fine-tunes configs/segformer_afno25_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/afno25.py'
]
model = dict(backbone=dict(mixers={{_base_.afno25_mixer}}))
