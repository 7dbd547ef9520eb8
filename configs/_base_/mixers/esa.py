# ESA (SegFormer): EfficientSelfAttentionMixer.variants['esa']
# in afno_seg/mixers/attention.py, written here by tools/analysis/list_mixers.py --write-configs.
esa_mixer = dict(type='EfficientSelfAttentionMixer')
