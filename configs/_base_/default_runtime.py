# mmseg's configs/_base_/default_runtime.py, plus the afno_seg plug-in import.
default_scope = 'mmseg'
custom_imports = dict(imports=['afno_seg'], allow_failed_imports=False)
env_cfg = dict(
    cudnn_benchmark=True,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    dist_cfg=dict(backend='nccl'),
)
# AFNO_SEG_TENSORBOARD=1 in the environment adds TensorBoard logging (mmengine's
# TensorboardVisBackend: event files in work_dir/<timestamp>/vis_data/); mmengine substitutes
# {{$VAR:default}} in configs when it reads them. LocalVisBackend (the JSON log) always stays.
vis_backends = [dict(type='LocalVisBackend')] + [
    dict(type='TensorboardVisBackend')] * {{'$AFNO_SEG_TENSORBOARD:0'}}
visualizer = dict(
    type='SegLocalVisualizer', vis_backends=vis_backends, name='visualizer')
log_processor = dict(by_epoch=False)
log_level = 'INFO'
load_from = None
resume = False

tta_model = dict(type='SegTTAModel')

# afno_seg's reliability hooks (docs/reliability.md): RNG states saved in and restored from every
# checkpoint so --resume continues exactly; a non-finite loss stops training naming the iteration
# and the first module with a non-finite output (under fp16 loss scaling the step is skipped).
custom_hooks = [dict(type='RandomStateHook'), dict(type='NonFiniteLossHook')]
# A fixed seed: mmengine re-seeds after building the samplers, so seed=None breaks exact resume.
randomness = dict(seed=0)
