# ImageNet-1K pretraining of the SegFormer-B3 encoder with AFNO-100% in every stage (8 blocks,
# soft-shrink 0.01, all modes kept); fine-tunes configs/segformer_afno_b3_cityscapes.py.
_base_ = ['./_base_/models/mixer-mit-b3.py', './_base_/imagenet_deit-recipe.py']
model = dict(
    backbone=dict(
        mixers=dict(
            type='AFNOMixer',
            num_blocks=8,
            hidden_size_factor=1,
            sparsity_threshold=0.01,
            hard_thresholding_fraction=1.0)))
