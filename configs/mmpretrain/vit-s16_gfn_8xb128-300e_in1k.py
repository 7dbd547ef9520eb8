# GFN-ViT-S/16 on ImageNet-1K (GFNet-XS: the same sizes), the comparison of the AFNO paper's
# Table 5; filters stored at the 14x14 patch grid of a 224 image.
_base_ = [
    './_base_/models/mixer-vit-s16.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/gfn.py'
]
model = dict(backbone=dict(mixers={{_base_.gfn_mixer}}))
