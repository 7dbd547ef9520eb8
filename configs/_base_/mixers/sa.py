# Full self-attention (no spatial reduction): quadratic in the tokens (65536 of them in stage 1 of
# a 1024x1024 crop); runs through fused scaled-dot-product attention kernels.
# One definition, used by the Cityscapes and the MMPretrain configs.
sa_mixer = dict(type='FullSelfAttentionMixer')
