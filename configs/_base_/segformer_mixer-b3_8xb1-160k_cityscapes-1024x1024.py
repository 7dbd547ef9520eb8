# The one base of every configs/segformer_<mixer>_b3_cityscapes.py: SegFormer-B3 with a pluggable
# token mixer, Cityscapes 1024x1024 crops, 160k iterations, 8 GPUs x 1 image (total batch 8),
# fp16 (AmpOptimWrapper, dynamic loss scale), sliding-window test 1024/768.
# Same recipe as mmseg's configs/segformer/segformer_mit-b3_8xb1-160k_cityscapes-1024x1024.py;
# deviations (decode-head width 768, fp16, local pretrained file) are explained in docs/configs.md.
# Fewer GPUs: the lr 6e-5 belongs to the total batch 8; see auto_scale_lr in
# ./schedules/schedule_160k_adamw_fp16.py for the two --cfg-options that keep the recipe.
_base_ = [
    './models/segformer_mixer-mit-b3.py',
    './datasets/cityscapes_1024x1024.py',
    './default_runtime.py',
    './schedules/schedule_160k_adamw_fp16.py',
]
crop_size = (1024, 1024)
data_preprocessor = dict(size=crop_size)
# MiT-B3 ImageNet-1K weights in any layout (official, mmseg's, transformers'; detected). Get them
# with `hf download nvidia/mit-b3 --local-dir data/pretrained/mit-b3` and convert them to this
# file with tools/model_converters/mit2afno_seg.py, or save OpenMMLab's mit_b3_20220624-13b1141c.pth
# here (docs/configs.md); nothing is downloaded at run time. NVIDIA's licence (non-commercial).
# Non-mixer weights must all load; mixer weights that do not exist in MiT are logged as newly
# initialised. Without the file tools/train.py stops at once; to train from scratch: --from-scratch
pretrained_checkpoint = 'data/pretrained/mit_b3.pth'
model = dict(
    data_preprocessor=data_preprocessor,
    backbone=dict(
        init_cfg=dict(type='Pretrained', checkpoint=pretrained_checkpoint)),
    test_cfg=dict(mode='slide', crop_size=(1024, 1024), stride=(768, 768)))
