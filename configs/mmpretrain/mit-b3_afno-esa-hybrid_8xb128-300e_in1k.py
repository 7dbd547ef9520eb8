# ImageNet-1K pretraining of the hybrid SegFormer-B3 encoder: AFNO-100% in stages 1-2, efficient
# self-attention in stages 3-4; fine-tunes configs/segformer_afno-esa-hybrid_b3_cityscapes.py.
_base_ = [
    './_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py',
    '../_base_/mixers/afno.py', '../_base_/mixers/esa.py'
]
model = dict(
    backbone=dict(mixers=[
        {{_base_.afno_mixer}}, {{_base_.afno_mixer}}, {{_base_.esa_mixer}},
        {{_base_.esa_mixer}}
    ]))
