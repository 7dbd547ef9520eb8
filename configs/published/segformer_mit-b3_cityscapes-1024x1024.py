# SegFormer-B3 as published: MiT-B3 with efficient self-attention and the paper's all-MLP decoder
# (AllMLPHead, 768 channels), Cityscapes 19 classes, the B3 Cityscapes recipe of ../_base_ (slide
# test 1024/768). The model of nvidia/segformer-b3-finetuned-cityscapes-1024-1024 (paper: 81.7
# mIoU on val); its weights convert with tools/model_converters/segformer2afno_seg.py
# (docs/configs.md, "Published SegFormer models"). Training it starts from MiT-B3 ImageNet weights.
_base_ = [
    '../_base_/segformer_mixer-b3_8xb1-160k_cityscapes-1024x1024.py',
    '../_base_/mixers/esa.py'
]
model = dict(
    backbone=dict(mixers={{_base_.esa_mixer}}),
    decode_head=dict(type='AllMLPHead'))
