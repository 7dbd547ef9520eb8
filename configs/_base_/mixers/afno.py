# AFNO-100%: adaptive Fourier neural operator with every frequency kept (8 blocks, soft-shrink
# 0.01). AFNO paper, Table 4: 80.9 mIoU.
# One definition, used by the Cityscapes and the MMPretrain configs.
afno_mixer = dict(
    type='AFNOMixer',
    num_blocks=8,
    hidden_size_factor=1,
    sparsity_threshold=0.01,
    hard_thresholding_fraction=1.0)
