# The B3 ImageNet recipe shrunk to run on a CPU in under a minute on the generated tiny ImageNet
# (tools/dataset/make_tiny_imagenet.py: 4 classes told apart by shape and texture, 64x64 JPEGs,
# train/<class>/*.JPEG and val/<class>/*.JPEG). Same model family (MixerMiT + AFNO, global average
# pooling, linear head, label smoothing) and schedule shape (linear warm-up, then cosine, by epoch),
# scaled down: batch 16, 4 epochs (40 iterations), no Mixup/CutMix/RandAugment (too strong for 40
# steps). The backbone is that of configs/demo/segformer_afno_demo.py (widths 32-256, two layers a
# stage, AFNO with 4 blocks), so its checkpoint initialises the demo segmentor: docs/pretrain.md.
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['afno_seg'],
                      allow_failed_imports=False)
default_scope = 'mmpretrain'

num_classes = 4
data_preprocessor = dict(
    num_classes=num_classes,
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    to_rgb=True)
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='MixerMiT',
        embed_dims=32,
        num_layers=[2, 2, 2, 2],
        num_heads=[1, 2, 5, 8],
        mixers=dict(type='AFNOMixer', num_blocks=4, sparsity_threshold=0.01),
        out_indices=(3, ),  # the classifier pools the last stage only
        drop_path_rate=0.1),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=num_classes,
        in_channels=256,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)))

dataset_type = 'CustomDataset'
data_root = 'data/tiny_imagenet/'
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='RandomResizedCrop', scale=64, crop_ratio_range=(0.5, 1.0)),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs'),
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='PackInputs'),
]
train_dataloader = dict(
    batch_size=16,
    num_workers=0,
    dataset=dict(type=dataset_type, data_root=data_root, data_prefix=dict(img_path='train'),
                 pipeline=train_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=True))
val_dataloader = dict(
    batch_size=20,
    num_workers=0,
    dataset=dict(type=dataset_type, data_root=data_root, data_prefix=dict(img_path='val'),
                 pipeline=test_pipeline),
    sampler=dict(type='DefaultSampler', shuffle=False))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator

max_epochs = 4
optim_wrapper = dict(
    optimizer=dict(type='AdamW', lr=2e-3, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)),
    paramwise_cfg=dict(norm_decay_mult=0.0, bias_decay_mult=0.0))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-2, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=1, end=max_epochs,
         convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=max_epochs)
val_cfg = dict()
test_cfg = dict()
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=5),
    checkpoint=dict(type='CheckpointHook', interval=2, max_keep_ckpts=2))
randomness = dict(seed=0)
