# pooling (PoolFormer): PoolingMixer.variants['pool']
# in afno_seg/mixers/pooling.py, written here by tools/analysis/list_mixers.py --write-configs.
pool_mixer = dict(
    type='PoolingMixer',
    pool_size=3)
