# MSCA (SegNeXt): MSCAMixer.variants['msca']
# in afno_seg/mixers/msca.py, written here by tools/analysis/list_mixers.py --write-configs.
msca_mixer = dict(type='MSCAMixer')
