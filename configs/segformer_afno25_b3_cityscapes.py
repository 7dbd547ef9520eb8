# AFNO-25%: AFNO keeping the lowest 25% of the modes along both grid axes (the rest are zeroed and
# skip the spectral MLP).
_base_ = './_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py'
model = dict(
    backbone=dict(
        mixers=dict(
            type='AFNOMixer',
            num_blocks=8,
            hidden_size_factor=1,
            sparsity_threshold=0.01,
            hard_thresholding_fraction=0.25)))
