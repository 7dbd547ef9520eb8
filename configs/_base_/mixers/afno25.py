# AFNO-25%: AFNOMixer.variants['afno25']
# in afno_seg/mixers/afno.py, written here by tools/analysis/list_mixers.py --write-configs.
afno25_mixer = dict(
    type='AFNOMixer',
    num_blocks=8,
    hidden_size_factor=1,
    sparsity_threshold=0.01,
    hard_thresholding_fraction=0.25)
