# Global filter network: a learned complex filter per channel, stored at the 1024x1024 crop's
# stage grids (256, 128, 64, 32; from the backbone's base_img_size) and resized for other sizes.
_base_ = [
    './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    './_base_/mixers/gfn.py'
]
model = dict(backbone=dict(mixers={{_base_.gfn_mixer}}))
