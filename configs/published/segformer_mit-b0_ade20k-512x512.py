# SegFormer-B0 as published for ADE20K (150 classes): mmseg's SegFormer-B0 ADE20K recipe (512x512
# crops, 160k iterations, AdamW 6e-5, whole-image test at short side 512) with MixerMiT
# (efficient self-attention) and the paper's all-MLP decoder (AllMLPHead, 256 channels). The model
# of nvidia/segformer-b0-finetuned-ade-512-512 (paper: 37.4 mIoU on val); its weights convert
# with tools/model_converters/segformer2afno_seg.py (docs/configs.md, "Published SegFormer models").
# Data: mmseg's layout under data/ade/ADEChallengeData2016 (its dataset docs).
_base_ = ['mmseg::segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py']
custom_imports = dict(imports=['afno_seg'], allow_failed_imports=False)
model = dict(
    backbone=dict(
        _delete_=True,
        type='MixerMiT',
        arch='b0',
        mixers=dict(type='EfficientSelfAttentionMixer'),
        base_img_size=512,
        drop_path_rate=0.1,
        # MiT-B0 ImageNet weights, any layout (docs/configs.md); nothing is downloaded at run time.
        init_cfg=dict(type='Pretrained', checkpoint='data/pretrained/mit_b0.pth')),
    decode_head=dict(type='AllMLPHead', channels=256))
