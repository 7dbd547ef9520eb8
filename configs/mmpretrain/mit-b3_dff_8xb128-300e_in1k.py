# ImageNet-1K pretraining of the SegFormer-B3 encoder with DFFormer's dynamic filter (K=4 filters,
# 2C inner channels), the filters stored at the stage grids of a 224 crop (56, 28, 14, 7), as the
# released ImageNet models. Fine-tuning configs/segformer_dff_b3_cityscapes.py from it needs
# model.backbone.base_img_size=224 there too (the filters keep this grid and are resized
# bicubically to each input's grid at run time); see docs/pretrain.md.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/dff.py'
]
model = dict(backbone=dict(mixers={{_base_.dff_mixer}}))
