# Baseline: ImageNet-1K pretraining of the unchanged SegFormer-B3 encoder (efficient self-attention,
# reductions 8, 4, 2, 1), i.e. MiT-B3 as released by the SegFormer authors, trained here with the
# same recipe as the mixers; fine-tunes configs/segformer_esa_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/esa.py'
]
model = dict(backbone=dict(mixers={{_base_.esa_mixer}}))
