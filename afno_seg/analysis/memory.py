"""Memory of one training step, measurable on any device:

- **saved for backward**: bytes of the distinct storages autograd keeps between the forward and
  the backward pass (parameters left out, they are held anyway; autocast's low-precision copies of
  the weights counted, they are not). Independent of the device and of the allocator.
- **peak**: the most memory allocated during the step beyond what was allocated before it. On CUDA
  ``max_memory_allocated``; on a CPU replayed from the profiler's allocation events.
"""
from collections.abc import Callable

import torch

__all__ = ['SavedTensorBytes', 'build_for_step', 'fake_saved_bytes', 'peak_bytes', 'random_batch',
           'step_memory']


class SavedTensorBytes(torch.autograd.graph.saved_tensors_hooks):
    """A context (re-entrant) that counts in ``bytes`` the tensors saved for backward inside it.

    Args:
        exclude (iterable[Tensor]): Tensors whose storage is not counted (the parameters).
    """

    def __init__(self, exclude=()) -> None:
        # A storage's identity is its StorageImpl (``_cdata``, as torch's StorageWeakRef): data
        # pointers are 0 for every meta/fake tensor and for empty ones.
        self._skip = {t.untyped_storage()._cdata for t in exclude}
        self._seen: set[int] = set()
        self.bytes = 0
        super().__init__(self._pack, lambda tensor: tensor)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        pointer = storage._cdata
        if pointer not in self._skip and pointer not in self._seen:
            self._seen.add(pointer)
            self.bytes += storage.nbytes()
        return tensor


def peak_bytes(step: Callable[[], None], device: torch.device | str) -> float:
    """The most memory allocated while ``step()`` runs beyond what was allocated before it: on
    CUDA ``max_memory_allocated``; on a CPU replayed from the profiler's allocation events (every
    tensor torch allocates, not a library's internal buffers)."""
    if torch.device(device).type == 'cuda':
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
        return float(torch.cuda.max_memory_allocated(device) - before)
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    current = peak = 0
    for event in sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns()):
        if event.name() == '[memory]' and event.device_type() == torch.autograd.DeviceType.CPU:
            current += event.nbytes()
            peak = max(peak, current)
    return float(peak)


def step_memory(step: Callable[[], None], model: torch.nn.Module,
                device: torch.device) -> dict[str, float]:
    """Run ``step`` (a whole training step of ``model``) once; return ``peak_bytes`` (beyond what
    was allocated before it), ``saved_bytes`` (activations saved for backward) and
    ``before_bytes`` (allocated before it on CUDA; parameters and buffers on a CPU)."""
    if device.type == 'cuda':
        before = torch.cuda.memory_allocated(device)
    else:
        before = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    counter = SavedTensorBytes(model.parameters())
    with counter:
        peak = peak_bytes(step, device)
    return dict(peak_bytes=peak, saved_bytes=float(counter.bytes), before_bytes=float(before))


def random_batch(crop: int, num_classes: int, generator: torch.Generator,
                 batch: int = 1) -> dict:
    """``batch`` random uint8 images at ``crop`` x ``crop`` with blocky labels (16 px cells, so
    the loss has structure to fit; the top rows ignored, 255), as a segmentor's data batch."""
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample
    inputs, samples = [], []
    for _ in range(batch):
        inputs.append(torch.randint(0, 256, (3, crop, crop), dtype=torch.uint8,
                                    generator=generator))
        cells = torch.randint(0, num_classes, (1, crop // 16 + 1, crop // 16 + 1),
                              generator=generator)
        label = cells.repeat_interleave(16, 1).repeat_interleave(16, 2)[:, :crop, :crop]
        label[:, :crop // 32] = 255
        samples.append(SegDataSample(gt_sem_seg=PixelData(data=label), metainfo=dict(
            img_shape=(crop, crop), ori_shape=(crop, crop), pad_shape=(crop, crop))))
    return dict(inputs=inputs, data_samples=samples)


def build_for_step(cfg, precision: str, device: torch.device):
    """The segmentor of ``cfg`` (random weights, BN for SyncBN) on ``device`` in train mode and
    its optimizer wrapper in ``precision`` (:func:`afno_seg.engine.apply_precision`)."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.optim import build_optim_wrapper
    from mmseg.registry import MODELS

    from afno_seg.engine.precision import apply_precision
    cfg.model.backbone.init_cfg = None  # random weights: no pretrained file needed
    apply_precision(cfg, precision, cuda=device.type == 'cuda')
    model = revert_sync_batchnorm(MODELS.build(cfg.model))
    model.init_weights()
    model = model.to(device).train()
    return model, build_optim_wrapper(model, cfg.optim_wrapper)


def fake_saved_bytes(model: torch.nn.Module, crop: int, batch: int = 1,
                     precision: str = 'fp32') -> float:
    """Bytes a segmentor's training forward saves for backward at ``crop``, counted under
    ``FakeTensorMode``: shapes only, no arithmetic, so seconds instead of minutes at 1024x1024 on a
    CPU (what autograd saves does not depend on the values). The forward is the backbone, the
    decode head and its loss at the label's size; mmseg's accuracy metric is left out (boolean
    indexing needs values; it saves a few MB of indices).

    Args:
        model: An mmseg ``EncoderDecoder`` on the CPU.
        crop (int): Square input size.
        batch (int): Images. Default: 1.
        precision (str): 'fp32', or 'fp16'/'bf16' for that CPU autocast. Default: 'fp32'.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    counter = SavedTensorBytes(model.parameters())
    dtype = {'fp16': torch.float16, 'bf16': torch.bfloat16}.get(precision)
    with FakeTensorMode(allow_non_fake_inputs=True), counter, torch.autocast(
            'cpu', dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        label = torch.zeros(batch, crop, crop, dtype=torch.long)
        logits = model.decode_head(model.extract_feat(torch.empty(batch, 3, crop, crop)))
        logits = torch.nn.functional.interpolate(logits, size=(crop, crop), mode='bilinear',
                                                 align_corners=model.decode_head.align_corners)
        losses = model.decode_head.loss_decode
        for loss in losses if isinstance(losses, torch.nn.ModuleList) else [losses]:
            loss(logits, label, ignore_index=model.decode_head.ignore_index)
    return float(counter.bytes)
