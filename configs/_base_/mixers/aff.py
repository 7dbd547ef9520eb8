# AFF: AFFMixer.variants['aff']
# in afno_seg/mixers/aff.py, written here by tools/analysis/list_mixers.py --write-configs.
aff_mixer = dict(
    type='AFFMixer',
    num_blocks=8,
    hidden_size_factor=1,
    sparsity_threshold=0.01,
    act='relu')
