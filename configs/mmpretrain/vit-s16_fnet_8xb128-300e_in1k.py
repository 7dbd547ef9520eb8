# FNet-ViT-S/16 on ImageNet-1K, the comparison of the AFNO paper's Table 5: Re of the 3-D DFT as
# the mixer (no parameters, about 15M in all).
_base_ = [
    './_base_/models/mixer-vit-s16.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/fnet.py'
]
model = dict(backbone=dict(mixers={{_base_.fnet_mixer}}))
