# Hybrid: AFNO-100% in the high-resolution stages 1-2 (where attention is costliest), SegFormer's
# efficient self-attention in stages 3-4.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/afno.py', './_base_/mixers/esa.py'
]
model = dict(
    backbone=dict(mixers=[
        {{_base_.afno_mixer}}, {{_base_.afno_mixer}}, {{_base_.esa_mixer}},
        {{_base_.esa_mixer}}
    ]))
