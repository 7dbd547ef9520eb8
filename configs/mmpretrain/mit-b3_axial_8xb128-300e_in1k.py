# ImageNet-1K pretraining of the SegFormer-B3 encoder with axial attention (heads 1, 2, 5, 8);
# fine-tunes configs/segformer_axial_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/axial.py'
]
model = dict(backbone=dict(mixers={{_base_.axial_mixer}}))
