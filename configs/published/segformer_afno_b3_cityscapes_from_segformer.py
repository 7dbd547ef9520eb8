# AFNO from a trained SegFormer: the published SegFormer-B3 Cityscapes model with AFNO-100% in
# every stage. Everything but the token mixers loads from the converted SegFormer (load_from);
# the AFNO tensors start from their own initialisation and the training log lists exactly them.
# Any per-stage mix works the same way, e.g. tools/train.py THIS_CONFIG --mixer afno+afno+esa+esa
# (docs/configs.md, "AFNO from a trained SegFormer").
_base_ = ['./segformer_mit-b3_cityscapes-1024x1024.py', '../_base_/mixers/afno.py']
# tools/model_converters/segformer2afno_seg.py output; nothing is downloaded at run time.
load_from = 'data/pretrained/segformer-b3-cityscapes.pth'
model = dict(
    backbone=dict(mixers={{_base_.afno_mixer}}, init_cfg=None))  # weights come from load_from
# 16k iterations, a tenth of the 160k recipe: only the mixers start untrained (the attention they
# replace is 20.1 M of MiT-B3's 44.1 M parameters; patch embeddings, Mix-FFNs, norms and the head
# arrive trained), and at demo scale the transplant beats training from scratch for the same
# iterations (docs/configs.md). Same lr, warm-up 1500, poly to 16k; evaluation and a checkpoint at
# 8k and 16k.
max_iters = 16000
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(type='PolyLR', eta_min=0.0, power=1.0, begin=1500, end=max_iters, by_epoch=False)
]
train_cfg = dict(max_iters=max_iters, val_interval=8000)
default_hooks = dict(checkpoint=dict(interval=8000))
