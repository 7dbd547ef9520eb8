# GFN: GlobalFilterMixer.variants['gfn']
# in afno_seg/mixers/gfn.py, written here by tools/analysis/list_mixers.py --write-configs.
gfn_mixer = dict(type='GlobalFilterMixer')
