# Axial attention: multi-head attention along H, then along W (heads from the backbone stage).
# One definition, used by the Cityscapes and the MMPretrain configs.
axial_mixer = dict(type='AxialAttentionMixer')
