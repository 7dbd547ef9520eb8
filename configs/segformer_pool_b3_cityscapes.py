# PoolFormer's pooling, the control without parameters: a 3x3 average over the tokens on the grid
# (border windows clipped, count_include_pad=False) minus the token, in every stage.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/pool.py'
]
model = dict(backbone=dict(mixers={{_base_.pool_mixer}}))
