# SegFormer's Cityscapes schedule (mmseg configs/segformer/segformer_mit-b0_8xb1-160k_cityscapes-
# 1024x1024.py) in mixed precision: AdamW 6e-5, weight decay 0.01, decode head lr x10, no decay on
# norms and positional blocks, 1500-iteration linear warm-up, then poly (power 1) to 160k
# iterations.
# fp16 via AmpOptimWrapper with a dynamic loss scale (torch GradScaler: starts at 2**16, halves on
# inf/nan gradients and skips that step, doubles after 2000 clean steps). Fourier mixers compute
# their FFTs in float32 inside autocast (see docs), so only the linear layers run in half precision.
optim_wrapper = dict(
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW', lr=0.00006, betas=(0.9, 0.999), weight_decay=0.01),
    paramwise_cfg=dict(
        custom_keys={
            'pos_block': dict(decay_mult=0.),
            'norm': dict(decay_mult=0.),
            'head': dict(lr_mult=10.)
        }))
param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0,
        end=1500),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=160000,
        by_epoch=False)
]
# Learning rate vs batch: lr=6e-5 belongs to a total batch of 8 (8 GPUs x 1 image).
# With fewer GPUs either keep the total batch (preferred; same schedule), e.g. 4 GPUs:
#   --cfg-options train_dataloader.batch_size=2
# or keep 1 image per GPU and scale the lr linearly with the total batch (mmengine scales
# optimizer lr by world_size * batch_size / base_batch_size when enabled):
#   --cfg-options auto_scale_lr.enable=True
auto_scale_lr = dict(enable=False, base_batch_size=8)
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=160000, val_interval=16000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    # Atomic saves; last_checkpoint only ever names a complete file; also every 30 minutes of
    # wall clock, so a kill without warning loses minutes, not a 16k-iteration interval, and a
    # stop signal saves at once (docs/reliability.md).
    checkpoint=dict(type='AtomicCheckpointHook', by_epoch=False, interval=16000,
                    interval_minutes=30),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
