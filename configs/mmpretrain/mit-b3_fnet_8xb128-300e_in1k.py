# ImageNet-1K pretraining of the SegFormer-B3 encoder with FNet mixing (Re of the 3-D DFT, no
# parameters); fine-tunes configs/segformer_fnet_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/fnet.py'
]
model = dict(backbone=dict(mixers={{_base_.fnet_mixer}}))
