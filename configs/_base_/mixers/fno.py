# FNO (16x16 modes): FNOMixer.variants['fno']
# in afno_seg/mixers/fno.py, written here by tools/analysis/list_mixers.py --write-configs.
fno_mixer = dict(
    type='FNOMixer',
    modes=(16, 16))
