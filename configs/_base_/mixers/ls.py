# Long-Short (Transformer-LS): LongShortAttentionMixer.variants['ls']
# in afno_seg/mixers/long_short.py, written here by tools/analysis/list_mixers.py --write-configs.
ls_mixer = dict(
    type='LongShortAttentionMixer',
    window_size=8,
    num_landmarks=32)
