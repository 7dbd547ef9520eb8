# The demo config shrunk for tests: 16-channel MiT, 64x64 crops, a few iterations, no workers,
# no stochastic layers (so a resumed run can be compared with an uninterrupted one).
_base_ = ['../../configs/demo/segformer_afno_demo.py']
crop_size = (64, 64)
model = dict(
    data_preprocessor=dict(size=crop_size),
    backbone=dict(embed_dims=16, drop_path_rate=0.0),
    decode_head=dict(in_channels=[16, 32, 80, 128], channels=32, dropout_ratio=0.0))
train_pipeline = [
    dict(type='BadSampleGuard', on_bad='raise', transforms=[
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=19)]),
    dict(type='RandomResize', scale=(128, 64), ratio_range=(0.75, 1.5), keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),  # top level: mmseg's inference APIs swap their loaders in
    dict(type='Resize', scale=(128, 64), keep_ratio=True),
    dict(type='BadSampleGuard', requires='seg_map_path', transforms=[
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=19)]),
    dict(type='PackSegInputs')
]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
max_iters = 6
train_cfg = dict(max_iters=max_iters, val_interval=max_iters)
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=False, begin=0, end=2),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=2, end=max_iters, by_epoch=False)
]
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=3, max_keep_ckpts=-1))
