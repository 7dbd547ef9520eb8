# Dynamic filter: DynamicFilterMixer.variants['dff']
# in afno_seg/mixers/dff.py, written here by tools/analysis/list_mixers.py --write-configs.
dff_mixer = dict(type='DynamicFilterMixer')
