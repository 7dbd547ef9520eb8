# What every ImageNet-1K config here shares: mmpretrain's DeiT/Swin data pipeline (224 random
# resized crops, RandAugment m9-mstd0.5, random erasing 0.25; test: resize 256 + centre crop 224,
# bicubic), 8 GPUs x 128 images, the DeiT schedule, mmpretrain's runtime, afno_seg's modules.
# ImageNet goes in data/imagenet (mmpretrain's layout: train/<wnid>/*.JPEG and val/ as folders or
# with meta/{train,val}.txt); see docs/pretrain.md. Nothing is downloaded.
_base_ = [
    'mmpretrain::_base_/datasets/imagenet_bs64_swin_224.py',
    './schedules/imagenet_adamw-300e_deit.py',
    'mmpretrain::_base_/default_runtime.py',
]
custom_imports = dict(imports=['afno_seg'],
                      allow_failed_imports=False)
default_scope = 'mmpretrain'

data_preprocessor = dict(num_classes=1000)  # the batch augmentations need it
train_dataloader = dict(batch_size=128)
val_dataloader = dict(batch_size=128)
test_dataloader = val_dataloader

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=100),
    # One checkpoint an epoch for --resume, the last three kept (each holds the AdamW state),
    # and the best top-1 kept separately.
    checkpoint=dict(type='CheckpointHook', interval=1, max_keep_ckpts=3,
                    save_best='accuracy/top1', rule='greater'))
randomness = dict(seed=0)
