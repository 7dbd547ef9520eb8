"""A newcomer's mistakes are one line each, and every run ends by saying where its results are.

Mistakes (run through ``run_tool`` in this process, as each tool's ``__main__`` does): a mixer
setting the mixer does not take or of the wrong kind, config and checkpoint swapped, ``--device
cuda`` on a machine without CUDA (every tool that takes ``--device``), and before the Runner: a
misspelt ``--cfg-options`` or loop key, a weights-only ``--resume``, random bytes as a
checkpoint. Results: the last lines of tools/train.py (the shared ``tiny_trained`` run),
tools/test.py with ``--out``, ``--show-dir`` and ``--report``, tools/analysis/get_flops.py;
published files share one mode.

Cost: no subprocess of its own; one in-process evaluation of the tiny model (4 images) and one
FLOP trace of it.
"""
import os
import re
import stat
from pathlib import Path

import pytest
import torch

from afno_seg.engine import run_tool
from afno_seg.mixer_switch import switch_mixer

from conftest import TINY_CONFIG, cli_options, data_roots, load_script

DEMO = 'configs/demo/segformer_afno_demo.py'


def one_line(capsys, tool: str, *argv: str) -> str:
    """Run a tool's main as its ``__main__`` does: exit 1, one stderr line, no traceback."""
    main = load_script(tool).main
    assert run_tool(lambda: main(list(argv))) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith('error: '), err
    return err


@pytest.mark.parametrize('spec,expected', [
    ('afno:sparsity=0.1', ["no mixer here has a setting 'sparsity'; afno (AFNOMixer) takes "
                           'num_blocks=8, hidden_size_factor=1, sparsity_threshold=0.01']),
    ('gfn:sparsity_threshold=0.1', ["no mixer here has a setting 'sparsity_threshold'; gfn "
                                    '(GlobalFilterMixer) takes base_hw_shape=(64, 64)']),
    ('afno:num_blocks=abc', ["num_blocks takes values like its default 8 (int), got 'abc'"]),
    ('afno+afno+esa+esa:sparsity=0.1', ["no mixer here has a setting 'sparsity'; afno",
                                        '; esa (EfficientSelfAttentionMixer) takes num_heads, '
                                        'sr_ratio=1']),
])
def test_a_bad_mixer_setting_is_one_line(capsys, spec, expected):
    err = one_line(capsys, 'tools/train.py', DEMO, '--mixer', spec)
    assert all(part in err for part in expected), err


def test_good_mixer_settings_pass():
    from mmengine.config import Config
    cfg = switch_mixer(Config.fromfile(TINY_CONFIG), 'afno:hard_thresholding_fraction=1:'
                       'num_blocks=2', pretrained=False)
    assert cfg.model.backbone.mixers[0]['num_blocks'] == 2
    switch_mixer(Config.fromfile(TINY_CONFIG), 'fno:modes=[4,4]', pretrained=False)
    hybrid = switch_mixer(Config.fromfile(TINY_CONFIG), 'afno+afno+esa+esa:sparsity_threshold=0.1',
                          pretrained=False).model.backbone.mixers
    assert [m.get('sparsity_threshold') for m in hybrid] == [0.1, 0.1, None, None]


def test_the_demo_config_needs_no_mit_weights_under_mixer(tmp_path, monkeypatch):
    """It names none, so --mixer names none: nothing for the training preflight to refuse."""
    from mmengine.config import Config

    from afno_seg.engine.preflight import check_pretrained
    monkeypatch.chdir(tmp_path)  # no data/pretrained here
    cfg = switch_mixer(Config.fromfile(str(Path(__file__).parents[1] / DEMO)), 'gfn')
    assert cfg.model.backbone.get('init_cfg') is None
    check_pretrained(cfg)


def test_swapped_config_and_checkpoint_are_named(capsys, tmp_path):
    """Training's test, inference and export all say which argument is which."""
    checkpoint = str(tmp_path / 'iter_6.pth')
    image = tmp_path / 'image.png'
    image.write_bytes(b'')  # named, never read: the config is refused first
    for tool, extra in [('tools/test.py', []),
                        ('tools/inference.py', [str(image), '--out-dir', str(tmp_path / 'o')]),
                        ('tools/deployment/pytorch2onnx.py', ['--shape', '64', '64', '--out',
                                                              str(tmp_path / 'm.onnx')])]:
        err = one_line(capsys, tool, checkpoint, TINY_CONFIG, *extra)
        assert f'{checkpoint} looks like a checkpoint and {TINY_CONFIG} like a config: ' \
               'swap them' in err, (tool, err)
    err = one_line(capsys, 'tools/inference.py', checkpoint, str(image), str(image),
                   '--out-dir', str(tmp_path / 'o'))
    assert f'{checkpoint}: a config is a .py/.yml/.yaml/.json file and this looks like a ' \
           'checkpoint; the tools take the config first' in err, err


def test_mistakes_are_one_line_before_the_runner(capsys, tiny_trained, tiny_demo_data, tmp_path):
    """Refused before mmengine builds anything (the work_dir gets no log folder): a misspelt
    ``--cfg-options`` key, a loop key its loop does not take, a ``--resume`` of a weights-only
    file, random bytes as load_from or to test, a config given as the checkpoint."""
    weights = tmp_path / 'weights.pth'
    torch.save(dict(state_dict=torch.load(tiny_trained.work_dir / 'iter_6.pth',
                                          weights_only=False)['state_dict']), weights)
    noise = tmp_path / 'noise.pth'
    noise.write_bytes(bytes(range(256)) * 4)
    work_dir, data = tmp_path / 'w', cli_options(data_roots(tiny_demo_data))
    train = ['tools/train.py', TINY_CONFIG, '--work-dir', str(work_dir)]
    test = ['tools/test.py', TINY_CONFIG]
    for argv, expected in [
            (train + data + ['train_cfg.max_iter=4'], '--cfg-options train_cfg.max_iter=4: '
             "train_cfg has no key 'max_iter'; did you mean train_cfg.max_iters?"),
            (train + data + ['val_cfg.fp61=True'], "val_cfg.fp61=True: ValLoop takes no 'fp61'; "
             'did you mean fp16? (it takes fp16)'),
            (train + ['--resume'] + data + [f'load_from={weights}'],
             f'--resume checkpoint {weights} is not a training checkpoint (weights only'),
            (train + data + [f'load_from={noise}'],
             f'{noise} (1024 bytes) is not a readable PyTorch checkpoint (no container header)'),
            (test + [str(noise)] + data, f'{noise} (1024 bytes) is not a readable PyTorch'),
            (test + [TINY_CONFIG] + data, f'checkpoint {TINY_CONFIG} is a config file')]:
        err = one_line(capsys, argv[0], *argv[1:])
        assert expected in err, (argv[-1], err)
        assert not work_dir.exists() or not any(work_dir.iterdir()), argv


def test_new_cfg_options_keys_pass_and_near_misses_do_not():
    from mmengine.config import Config

    from afno_seg.engine import UserError
    from afno_seg.engine.preflight import check_option_keys
    cfg = Config.fromfile(TINY_CONFIG)
    check_option_keys(cfg, {'test_cfg.fp16': True, 'train_dataloader.timeout': 30, 'seed': 1,
                            'train_dataloader.dataset.pipeline.2.scale': (64, 32)})
    with pytest.raises(UserError, match=r'train_dataloader has no key .num_worker.; did you mean '
                                        r'train_dataloader.num_workers\?'):
        check_option_keys(cfg, {'train_dataloader.num_worker': 0})


DEVICE_TOOLS = [
    ('tools/analysis/get_flops.py', [TINY_CONFIG]),
    ('tools/analysis/mixer_table.py', ['--sweep']),
    ('tools/analysis/benchmark_model.py', []),
    ('tools/analysis/benchmark_mixers.py', []),
    ('tools/analysis/step_memory.py', []),
]


@pytest.mark.parametrize('tool,argv', DEVICE_TOOLS, ids=[t for t, _ in DEVICE_TOOLS])
def test_device_cuda_without_cuda_is_one_line(capsys, monkeypatch, tool, argv):
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    err = one_line(capsys, tool, *argv, '--device', 'cuda')
    assert err == 'error: --device cuda: no CUDA device is available here (use --device cpu)'


def results_of(output: str) -> dict[str, str]:
    """The run's closing ``results:`` block (it must be the last lines): what -> where."""
    lines = output.rstrip().splitlines()
    assert 'results:' in lines, output[-2000:]
    start = len(lines) - 1 - lines[::-1].index('results:')
    rows = [re.fullmatch(r'  (\S+(?: \S+)*) {2,}(\S.*)', line) for line in lines[start + 1:]]
    assert rows and all(rows), lines[start:]
    return dict(row.groups() for row in rows)


def test_training_ends_with_its_checkpoint_metrics_and_log(tiny_trained):
    rows = results_of(tiny_trained.result.stdout)
    work_dir = tiny_trained.work_dir
    assert rows['checkpoint'] == str(work_dir / 'iter_6.pth')
    assert 'mIoU' in rows['validation'] and '(iteration 6)' in rows['validation']
    assert Path(rows['config']) == work_dir / 'tiny_demo.py'
    assert Path(rows['log']).is_file() and Path(rows['log']).parent.parent == work_dir


def test_testing_ends_with_each_output_where_it_is(tiny_trained, tiny_demo_data, tmp_path,
                                                   capsys):
    work_dir = tmp_path / 'work'
    main = load_script('tools/test.py').main
    assert run_tool(lambda: main([
        TINY_CONFIG, str(tiny_trained.work_dir / 'iter_6.pth'), '--work-dir', str(work_dir),
        '--out', str(tmp_path / 'pred'), '--show-dir', 'vis', '--report', str(tmp_path / 'rep'),
        *cli_options(data_roots(tiny_demo_data))])) == 0
    rows = results_of(capsys.readouterr().out)
    assert 'mIoU' in rows['metrics'] and Path(rows['metrics json']).is_file()
    assert rows['predictions'] == f'{tmp_path / "pred"} (4 files)'
    assert rows['report'] == str(tmp_path / 'rep' / 'report.html')
    painted = Path(rows['painted images'])
    assert painted == work_dir / 'vis' / 'vis_data' / 'vis_image' and len(os.listdir(painted)) == 4
    assert Path(rows['log']).is_file()


def test_format_only_names_the_folder_its_pngs_are_in(tiny_trained, tiny_demo_data, tmp_path,
                                                      capsys):
    """mmseg's CityscapesMetric logs the folder's parent; the closing line names the folder."""
    server = tmp_path / 'server'
    main = load_script('tools/test.py').main
    assert run_tool(lambda: main([
        TINY_CONFIG, str(tiny_trained.work_dir / 'iter_6.pth'), '--work-dir', str(tmp_path / 'w'),
        '--format-only', str(server), *cli_options(data_roots(tiny_demo_data))])) == 0
    rows = results_of(capsys.readouterr().out)
    assert rows['test-server PNGs'] == f'{server} (4 files)' and 'metrics' not in rows
    assert len(list(server.glob('*_leftImg8bit.png'))) == 4


def test_flops_end_says_where_the_table_is(capsys):
    main = load_script('tools/analysis/get_flops.py').main
    main([TINY_CONFIG, '--shape', '64', '64'])
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith(
        'results: the table above (--out PATH also writes PATH.json and PATH.md)')
    # with --out: 'wrote PATH.md' last (docs/flops.md's example, run by test_doc_examples.py)


def test_published_files_share_the_mode_of_other_outputs(tiny_trained, tmp_path):
    publish = load_script('tools/publish_model.py').publish
    pth, safetensors = publish(str(tiny_trained.work_dir / 'iter_6.pth'), str(tmp_path))
    mode = stat.S_IMODE(os.stat(pth).st_mode)
    assert stat.S_IMODE(os.stat(safetensors).st_mode) == mode
    assert mode & 0o044 == 0o044 & ~current_umask()  # readable by others as the umask allows


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
