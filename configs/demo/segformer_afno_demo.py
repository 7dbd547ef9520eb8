# A small SegFormer whose token mixer is AFNO, trained on CPU in minutes on the generated street
# scenes of tools/dataset/make_demo_data.py (Cityscapes layout, 19 train ids): `make demo`.
# Same model family and pipeline as the Cityscapes configs, scaled down: MiT with embed 32,
# 2 layers per stage, AFNO (4 blocks) in every stage, a 128-channel SegFormer head, 256x256 crops.
_base_ = ['mmseg::_base_/default_runtime.py']
custom_imports = dict(imports=['afno_seg'], allow_failed_imports=False)

crop_size = (256, 256)
num_classes = 19
data_preprocessor = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    size=crop_size)
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    backbone=dict(
        type='MixerMiT',
        in_channels=3,
        embed_dims=32,
        num_stages=4,
        num_layers=[2, 2, 2, 2],
        num_heads=[1, 2, 5, 8],
        patch_sizes=[7, 3, 3, 3],
        sr_ratios=[8, 4, 2, 1],
        out_indices=(0, 1, 2, 3),
        mlp_ratio=4,
        qkv_bias=True,
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.1,
        mixers=dict(type='AFNOMixer', num_blocks=4, sparsity_threshold=0.01)),
    decode_head=dict(
        type='SegformerHead',
        in_channels=[32, 64, 160, 256],
        in_index=[0, 1, 2, 3],
        channels=128,
        dropout_ratio=0.1,
        num_classes=num_classes,
        norm_cfg=dict(type='BN', requires_grad=True),
        align_corners=False,
        loss_decode=dict(type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))

dataset_type = 'CityscapesDataset'
data_root = 'data/demo_cityscapes/'
train_pipeline = [
    dict(type='BadSampleGuard', on_bad='raise', transforms=[
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=num_classes)]),
    dict(type='RandomResize', scale=(512, 256), ratio_range=(0.75, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),  # top level: mmseg's inference APIs swap their loaders in
    dict(type='Resize', scale=(512, 256), keep_ratio=True),
    dict(type='BadSampleGuard', requires='seg_map_path', transforms=[
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=num_classes)]),
    dict(type='PackSegInputs')
]
train_dataloader = dict(
    batch_size=4,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(img_path='leftImg8bit/train', seg_map_path='gtFine/train'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(img_path='leftImg8bit/val', seg_map_path='gtFine/val'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator

# AdamW as SegFormer, with a higher lr for a short from-scratch run.
max_iters = 800
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(custom_keys={
        'pos_block': dict(decay_mult=0.),
        'norm': dict(decay_mult=0.),
        'head': dict(lr_mult=1.)
    }))
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=50),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=50, end=max_iters, by_epoch=False)
]
train_cfg = dict(type='IterBasedTrainLoop', max_iters=max_iters, val_interval=max_iters)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=20, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False, interval=200, max_keep_ckpts=2),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
# AFNO_SEG_TENSORBOARD=1 in the environment adds TensorBoard logging (event files in
# work_dir/<timestamp>/vis_data/), as in configs/_base_/default_runtime.py.
vis_backends = [dict(type='LocalVisBackend')] + [
    dict(type='TensorboardVisBackend')] * {{'$AFNO_SEG_TENSORBOARD:0'}}
visualizer = dict(type='SegLocalVisualizer', vis_backends=vis_backends, name='visualizer')
# Reliability (docs/reliability.md): exact resume, stop on a non-finite loss.
custom_hooks = [dict(type='RandomStateHook'), dict(type='NonFiniteLossHook')]
randomness = dict(seed=0)
