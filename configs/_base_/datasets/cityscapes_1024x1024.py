# Cityscapes (19 classes, gtFine) at 1024x1024 crops, as mmseg's
# configs/_base_/datasets/cityscapes.py + cityscapes_1024x1024.py.
# Expected layout (prepare labels with `python tools/dataset/cityscapes.py data/cityscapes`):
#   data/cityscapes/leftImg8bit/{train,val}/<city>/*_leftImg8bit.png
#   data/cityscapes/gtFine/{train,val}/<city>/*_gtFine_labelTrainIds.png
dataset_type = 'CityscapesDataset'
data_root = 'data/cityscapes/'
crop_size = (1024, 1024)
# BadSampleGuard: a bad image or label fails naming the file and the problem (ValidateSegMap:
# values outside the 19 train ids and 255, or a size unlike the image's). For a long run that
# should drop bad samples instead: --cfg-options train_dataloader.dataset.pipeline.0.on_bad=skip
train_pipeline = [
    dict(type='BadSampleGuard', on_bad='raise', transforms=[
        dict(type='LoadImageFromFile'),
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=19)]),
    dict(
        type='RandomResize',
        scale=(2048, 1024),
        ratio_range=(0.5, 2.0),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    # Image and label loading at the top level of the test pipeline, as mmseg's inference APIs
    # expect (they swap LoadImageFromFile for their own loaders); labels are checked by the guard
    # only where a sample has one (requires='seg_map_path'), so an image alone passes it.
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(2048, 1024), keep_ratio=True),
    # annotations are loaded after Resize: the metric compares at the original resolution
    dict(type='BadSampleGuard', requires='seg_map_path', transforms=[
        dict(type='LoadAnnotations'),
        dict(type='ValidateSegMap', num_classes=19)]),
    dict(type='PackSegInputs')
]
img_ratios = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
tta_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(
        type='TestTimeAug',
        transforms=[
            [
                dict(type='Resize', scale_factor=r, keep_ratio=True)
                for r in img_ratios
            ],
            [
                dict(type='RandomFlip', prob=0., direction='horizontal'),
                dict(type='RandomFlip', prob=1., direction='horizontal')
            ], [dict(type='LoadAnnotations')], [dict(type='PackSegInputs')]
        ])
]
train_dataloader = dict(
    batch_size=1,  # per GPU; the recipe's total batch is 8 GPUs x 1 = 8
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(
            img_path='leftImg8bit/train', seg_map_path='gtFine/train'),
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        data_prefix=dict(
            img_path='leftImg8bit/val', seg_map_path='gtFine/val'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader

val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
