# AFNO-ViT-S/16 on ImageNet-1K, the AFNO paper's Table 5 setup: 224x224, 16x16 patches, 12 layers
# of width 384, about 16M parameters, 300 epochs, AdamW lr 5e-4 x batch / 512, weight decay 0.05,
# 5 warm-up epochs. AFNO with 8 blocks (48 channels each), soft-shrink 0.01, all modes kept.
_base_ = [
    './_base_/models/mixer-vit-s16.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/afno.py'
]
model = dict(backbone=dict(mixers={{_base_.afno_mixer}}))
