# DFFormer's dynamic filter: K=4 global filters shared across the 2C inner channels, mixed per
# image and channel by a routing MLP (C/4 wide), stored at the 1024x1024 crop's stage grids (256,
# 128, 64, 32; from the backbone's base_img_size) and resized bicubically for other sizes.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/dff.py'
]
model = dict(backbone=dict(mixers={{_base_.dff_mixer}}))
