# ImageNet-1K pretraining of the SegFormer-B3 encoder with SegNeXt's MSCA in every stage (mmseg's
# MSCASpatialAttention, default kernels 5, 7, 11, 21, GELU); fine-tunes
# configs/segformer_msca_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/msca.py'
]
model = dict(backbone=dict(mixers={{_base_.msca_mixer}}))
