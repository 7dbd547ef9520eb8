# AFNO-25%: AFNO keeping the lowest 25% of the modes along both grid axes (the rest are zeroed and
# skip the spectral MLP).
# One definition, used by the Cityscapes and the MMPretrain configs.
afno25_mixer = dict(
    type='AFNOMixer',
    num_blocks=8,
    hidden_size_factor=1,
    sparsity_threshold=0.01,
    hard_thresholding_fraction=0.25)
