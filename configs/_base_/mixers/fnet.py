# FNet: FNetMixer.variants['fnet']
# in afno_seg/mixers/fnet.py, written here by tools/analysis/list_mixers.py --write-configs.
fnet_mixer = dict(type='FNetMixer')
