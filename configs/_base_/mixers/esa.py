# Baseline: SegFormer's efficient self-attention (spatial reduction 8, 4, 2, 1 from the backbone's
# sr_ratios), i.e. mmseg's MixVisionTransformer. AFNO paper, Table 4: 79.7 mIoU.
# One definition, used by the Cityscapes and the MMPretrain configs.
esa_mixer = dict(type='EfficientSelfAttentionMixer')
