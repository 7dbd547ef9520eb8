# SegFormer-B3 (encoder-decoder) with the MixerMiT backbone; the mixer is set per config.
# Follows mmseg's configs/_base_/models/segformer_mit-b0.py with the B3 sizes, except the
# decode-head width (see `channels` below and docs/configs.md).
norm_cfg = dict(type='SyncBN', requires_grad=True)
data_preprocessor = dict(
    type='SegDataPreProcessor',
    mean=[123.675, 116.28, 103.53],
    std=[58.395, 57.12, 57.375],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255)
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    pretrained=None,
    backbone=dict(
        type='MixerMiT',
        arch='b3',  # embed 64, layers [3, 4, 18, 3], heads [1, 2, 5, 8]
        # Default mixer (SegFormer's efficient self-attention); each config replaces it.
        mixers=dict(type='EfficientSelfAttentionMixer'),
        # Grid size of GlobalFilterMixer's stored filters: the stage grids of this image size
        # (1024 -> 256, 128, 64, 32); other sizes resize the filter.
        base_img_size=1024,
        in_channels=3,
        num_stages=4,
        patch_sizes=[7, 3, 3, 3],
        strides=[4, 2, 2, 2],
        sr_ratios=[8, 4, 2, 1],
        out_indices=(0, 1, 2, 3),
        mlp_ratio=4,
        qkv_bias=True,
        drop_rate=0.0,
        attn_drop_rate=0.0,
        drop_path_rate=0.1,
        with_cp=False),
    decode_head=dict(
        type='SegformerHead',
        in_channels=[64, 128, 320, 512],
        in_index=[0, 1, 2, 3],
        # Decode-head width: 768, as the original SegFormer code (NVlabs, decoder embed_dim=768
        # for B1-B5), on which the AFNO paper's SegFormer-B3 Cityscapes numbers were trained.
        # mmseg uses 256 for every size (~4x fewer head FLOPs, similar mIoU in its model zoo);
        # set model.decode_head.channels=256 to get mmseg's head.
        channels=768,
        dropout_ratio=0.1,
        num_classes=19,
        norm_cfg=norm_cfg,
        align_corners=False,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)),
    # model training and testing settings
    train_cfg=dict(),
    test_cfg=dict(mode='whole'))
