# axial attention: AxialAttentionMixer.variants['axial']
# in afno_seg/mixers/axial.py, written here by tools/analysis/list_mixers.py --write-configs.
axial_mixer = dict(type='AxialAttentionMixer')
