# ImageNet-1K classifier on the B3 MixerMiT backbone: the encoder of SegFormer-B3 with the mixer
# chosen per config, global average pooling of its last stage (512 channels at 1/32) and a linear
# classifier, as SegFormer's MiT ImageNet pretraining (Xie et al. 2021, which follows PVT/DeiT).
# The backbone arguments equal configs/_base_/models/segformer_mixer-mit-b3.py except
# out_indices (the classifier needs the last stage only; the parameters are the same) and
# base_img_size (224: the stage grids of an ImageNet crop), so the trained backbone initialises the
# segmentation model; see docs/pretrain.md.
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='MixerMiT',
        arch='b3',  # embed 64, layers [3, 4, 18, 3], heads [1, 2, 5, 8]
        mixers=dict(type='EfficientSelfAttentionMixer'),  # each config replaces it
        base_img_size=224,
        in_channels=3,
        num_stages=4,
        patch_sizes=[7, 3, 3, 3],
        strides=[4, 2, 2, 2],
        sr_ratios=[8, 4, 2, 1],
        out_indices=(3, ),
        mlp_ratio=4,
        qkv_bias=True,
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.1,
        with_cp=False),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(
        type='LinearClsHead',
        num_classes=1000,
        in_channels=512,
        loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=.02)),
    # DeiT's batch augmentation: each batch gets Mixup (alpha 0.8) or CutMix (alpha 1.0).
    train_cfg=dict(augments=[dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]))
