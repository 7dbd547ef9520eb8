"""LowResFusionSegformerHead against mmseg's SegformerHead: same state dict, same values and
gradients, in training (batch statistics) and inference."""
import pytest
import torch
from mmseg.models.decode_heads import SegformerHead

from afno_seg.decode_heads import LowResFusionSegformerHead, use_low_res_fusion

# Four maps at strides 4..32 of a non-square 56x88 image, and one whose finest map is not the
# largest in every axis (the head resizes to the first map's size, whatever it is).
GRIDS = {'strides': [(14, 22), (7, 11), (4, 6), (2, 3)], 'first-not-largest': [(5, 9), (7, 11),
                                                                                 (3, 4), (6, 2)]}


def heads(norm_cfg):
    kwargs = dict(in_channels=[4, 6, 8, 10], in_index=[0, 1, 2, 3], channels=12, num_classes=5,
                  dropout_ratio=0.0, norm_cfg=norm_cfg, align_corners=False)
    torch.manual_seed(0)
    stock = SegformerHead(**kwargs)
    ours = LowResFusionSegformerHead(**kwargs)
    ours.load_state_dict(stock.state_dict(), strict=True)
    return stock, ours


@pytest.mark.parametrize('norm_cfg', [dict(type='BN', requires_grad=True), None],
                         ids=['bn', 'no-norm'])
@pytest.mark.parametrize('grids', list(GRIDS.values()), ids=list(GRIDS))
def test_same_values_and_gradients(norm_cfg, grids):
    stock, ours = heads(norm_cfg)
    if norm_cfg is None:  # the fusion conv has a bias then, which must be added once
        assert ours.fusion_conv.conv.bias is not None
    torch.manual_seed(1)
    features = [torch.randn(2, channels, *grid)
                for channels, grid in zip([4, 6, 8, 10], grids)]
    for training in (True, False):
        stock.train(training), ours.train(training)
        expected, actual = stock(features), ours(features)
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
        if training:
            weights = torch.randn_like(expected)
            (expected * weights).sum().backward()
            (actual * weights).sum().backward()
            for (name, a), b in zip(stock.named_parameters(), ours.parameters()):
                torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
    if norm_cfg is not None:  # batch statistics went the same way
        torch.testing.assert_close(ours.fusion_conv.bn.running_var,
                                   stock.fusion_conv.bn.running_var)


def test_use_low_res_fusion_switches_mmseg_head_only():
    from mmengine.config import ConfigDict
    model = ConfigDict(decode_head=dict(type='SegformerHead', channels=8))
    assert use_low_res_fusion(model) and model.decode_head.type == 'LowResFusionSegformerHead'
    assert not use_low_res_fusion(model)  # already switched; other heads are left alone
    assert not use_low_res_fusion(ConfigDict(decode_head=dict(type='UPerHead')))
    assert not use_low_res_fusion(ConfigDict(backbone=dict(type='MixerMiT')))


def conv_macs(head, features) -> int:
    """Multiply-adds of every convolution in one forward pass (torch's FLOP counter / 2)."""
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        head.eval()(features)
    return counter.get_total_flops() // 2


@pytest.mark.parametrize('grids', list(GRIDS.values()), ids=list(GRIDS))
def test_fusion_runs_at_each_inputs_resolution(grids):
    """The head's reason to exist: fusion multiply-adds C^2 sum_i |x_i| instead of mmseg's
    n C^2 |x_1| (SegFormer-B3 at 1024x1024: 51 instead of 155 GMAC). mmseg's head, counted the
    same way, is the control that the counter sees the fusion conv at all."""
    stock, ours = heads(None)
    in_channels, channels, classes = [4, 6, 8, 10], 12, 5
    features = [torch.randn(1, c, *grid) for c, grid in zip(in_channels, grids)]
    pixels = [h * w for h, w in grids]
    projections_and_classifier = (sum(c * channels * p for c, p in zip(in_channels, pixels))
                                  + channels * classes * pixels[0])
    assert conv_macs(ours, features) == (projections_and_classifier
                                         + channels ** 2 * sum(pixels))
    assert conv_macs(stock, features) == (projections_and_classifier
                                          + len(grids) * channels ** 2 * pixels[0])
