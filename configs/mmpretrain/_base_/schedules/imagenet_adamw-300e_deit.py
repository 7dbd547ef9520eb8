# DeiT's ImageNet-1K schedule (Touvron et al. 2021, Table 9), used by SegFormer's MiT pretraining
# and by the AFNO paper's classification runs: AdamW, lr 5e-4 x total batch / 512, weight decay
# 0.05 (none on norms, biases and position embeddings), 5 linear warm-up epochs from lr x 1e-3,
# cosine decay to 1e-5, 300 epochs. fp16 (AmpOptimWrapper; bfloat16 autocast on a CPU).
# Gradient clipping at norm 5 follows mmpretrain's DeiT configs (DeiT itself does not clip).
base_lr = 5e-4
total_batch = 1024  # 8 GPUs x 128, the batch the lr below is written for
optim_wrapper = dict(
    type='AmpOptimWrapper',
    loss_scale='dynamic',
    optimizer=dict(
        type='AdamW', lr=base_lr * total_batch / 512, weight_decay=0.05, eps=1e-8,
        betas=(0.9, 0.999)),
    paramwise_cfg=dict(
        norm_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys={'.pos_embed': dict(decay_mult=0.0)}),
    clip_grad=dict(max_norm=5.0))

warmup_epochs = 5
max_epochs = 300
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=warmup_epochs,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', eta_min=1e-5, by_epoch=True, begin=warmup_epochs,
         end=max_epochs, convert_to_iter_based=True),
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=10)
val_cfg = dict()
test_cfg = dict()

# On another number of GPUs or batch, add --cfg-options auto_scale_lr.enable=True: mmengine then
# rescales the lr by (GPUs x batch) / 1024, which keeps the 5e-4 x batch / 512 rule.
auto_scale_lr = dict(base_batch_size=total_batch, enable=False)
