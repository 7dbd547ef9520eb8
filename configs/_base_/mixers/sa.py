# full self-attention: FullSelfAttentionMixer.variants['sa']
# in afno_seg/mixers/attention.py, written here by tools/analysis/list_mixers.py --write-configs.
sa_mixer = dict(type='FullSelfAttentionMixer')
