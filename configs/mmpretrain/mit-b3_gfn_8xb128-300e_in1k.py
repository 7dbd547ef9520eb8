# ImageNet-1K pretraining of the SegFormer-B3 encoder with global filters, stored at the stage grids
# of a 224 crop (56, 28, 14, 7). Fine-tuning configs/segformer_gfn_b3_cityscapes.py from it needs
# model.backbone.base_img_size=224 there too (the filters keep this grid and are resampled to
# each input's grid at run time); see docs/pretrain.md.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/gfn.py'
]
model = dict(backbone=dict(mixers={{_base_.gfn_mixer}}))
