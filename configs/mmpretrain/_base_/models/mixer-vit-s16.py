# ImageNet-1K classifier on MixerViT-S/16, the AFNO paper's Table 5 setup (Guibas et al. 2022):
# 224x224 images, 16x16 patches (a 14x14 grid), 12 layers of width 384, MLP ratio 4, no class
# token; the last layer's map is averaged and classified linearly (as GFNet). About 16M parameters
# with AFNO or GFN, 15M with FNet. The mixer is set per config.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='MixerViT',
        arch='s',  # embed 384, 12 layers (num_heads 6 reaches attention mixers only)
        mixers=dict(type='AFNOMixer'),
        img_size=224,
        patch_size=16,
        mlp_ratio=4,
        out_indices=(-1, ),
        drop_rate=0.0,
        drop_path_rate=0.1,
        final_norm=True),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=384,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)),
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))
