"""tools/analysis/mixer_study.py: mixer specs, commands, and a killed 2-iteration study of two
mixers on the tiny demo data that resumes and writes the table with the FLOP tool's numbers."""
import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace
from unittest import mock

import pytest
from mmengine.config import Config

from afno_seg.analysis.report import summarize
from afno_seg.engine.errors import UserError
from afno_seg.experiments.study import StudyOptions, train_command
from afno_seg.experiments.study_plan import Row, Run, parse_mixer_spec, scale_options
from afno_seg.mixers import mixer_variants

from conftest import ROOT, TINY_CONFIG, load_script

DEMO = str(ROOT / 'configs' / 'demo' / 'segformer_afno_demo.py')


def test_mixer_specs_give_one_dict_per_stage():
    variants = mixer_variants()
    hybrid = parse_mixer_spec('afno+afno+esa+esa', variants)
    assert [m['type'] for m in hybrid] == ['AFNOMixer'] * 2 + ['EfficientSelfAttentionMixer'] * 2
    swept = parse_mixer_spec('afno:sparsity_threshold=0.1:num_blocks=4', variants)
    assert len(swept) == 4 and all(m['sparsity_threshold'] == 0.1 and m['num_blocks'] == 4
                                   for m in swept)
    assert variants['afno'].get('sparsity_threshold') != 0.1  # the catalogue is not changed
    with pytest.raises(UserError, match="unknown mixer 'nope'.*afno"):
        parse_mixer_spec('nope', variants)
    with pytest.raises(UserError, match='one mixer or 4'):
        parse_mixer_spec('afno+esa', variants)
    with pytest.raises(UserError, match='key=value'):
        parse_mixer_spec('afno:0.1', variants)


def test_a_planned_study_keeps_its_configs_when_the_catalogue_changes(tmp_path, monkeypatch,
                                                                       capsys):
    from afno_seg.experiments import study_plan
    first = study_plan.plan_rows([DEMO], ['gfn', 'afno+afno+esa+esa'], tmp_path)
    assert [row.row_id for row in first] == ['segformer_afno_demo__gfn',
                                             'segformer_afno_demo__afno+afno+esa+esa']
    path = tmp_path / 'configs' / 'segformer_afno_demo__gfn.py'
    assert Config.fromfile(str(path)).model.backbone.mixers[0]['type'] == 'GlobalFilterMixer'
    text = path.read_text()
    changed = dict(mixer_variants(), gfn=dict(type='GlobalFilterMixer', base_hw_shape=(32, 32)))
    monkeypatch.setattr(study_plan, 'mixer_variants', lambda: changed)
    study_plan.plan_rows([DEMO], ['gfn'], tmp_path)
    assert path.read_text() == text
    assert 'differs from what the catalogue gives now' in capsys.readouterr().out


def test_eval_scales_resize_the_test_pipeline():
    cfg = Config.fromfile(DEMO)
    assert scale_options(cfg, 1.0) == []
    index = next(i for i, step in enumerate(cfg.test_dataloader.dataset.pipeline)
                 if step['type'] == 'Resize')
    assert scale_options(cfg, 2.0) == [f'test_dataloader.dataset.pipeline.{index}.scale=(1024,512)']
    assert scale_options(cfg, 0.5) == [f'test_dataloader.dataset.pipeline.{index}.scale=(256,128)']


def test_train_command_resumes_only_from_a_checkpoint(tmp_path):
    row = Row('r', DEMO, DEMO, 'AFNO')
    run = Run(row, 3, tmp_path / 'r' / 'seed3')
    options = StudyOptions(tmp_path, cfg_options=['train_cfg.max_iters=5'])
    command = train_command(run, options)
    # the installed package's step by module name, never a script of the checkout
    assert command[:4] == [sys.executable, '-m', 'afno_seg.experiments.study_jobs', 'train']
    kwargs = json.loads(command[-1])
    assert kwargs['resume'] is False and 'launcher' not in kwargs
    assert kwargs['cfg_options'] == ['randomness.seed=3', 'train_cfg.max_iters=5']
    run.train_dir.mkdir(parents=True)
    (run.train_dir / 'last_checkpoint').write_text(str(run.train_dir / 'iter_2.pth'))
    assert json.loads(train_command(run, options)[-1])['resume'] is True
    options.gpus = 4
    command = train_command(run, options)
    assert command[1:3] == ['-m', 'torch.distributed.run'] and '--nproc_per_node=4' in command
    assert json.loads(command[-1])['launcher'] == 'pytorch'
    assert not any('tools/' in part for part in command)


def study_args(work_dir, data_root, *extra) -> list[str]:
    root = str(data_root) + '/'
    return ['tools/analysis/mixer_study.py', TINY_CONFIG, '--mixers', 'afno', 'esa',
            '--work-dir', str(work_dir), '--cost-shape', '64', '64',
            '--bench-args', '--crop 64 --batch 1 --iters 1 --warmup 0 --infer-iters 1', *extra,
            '--cfg-options', f'train_dataloader.dataset.data_root={root}',
            f'val_dataloader.dataset.data_root={root}',
            f'test_dataloader.dataset.data_root={root}',
            'train_cfg.max_iters=2', 'param_scheduler.0.end=1', 'param_scheduler.1.begin=1',
            'param_scheduler.1.end=2', 'default_hooks.checkpoint.interval=1']


def run_study_here(*args) -> SimpleNamespace:
    """tools/analysis/mixer_study.py's main in this process (its steps still run as
    subprocesses, with one thread as run_tool gives them); ``stdout`` as a completed process
    has it. The kill below needs a process of its own; these runs do not."""
    study = load_script('tools/analysis/mixer_study.py')
    out = io.StringIO()
    with mock.patch.dict(os.environ, OMP_NUM_THREADS='1'), contextlib.redirect_stdout(out):
        study.main(list(args))
    return SimpleNamespace(stdout=out.getvalue())


@pytest.fixture(scope='module')
def killed_and_resumed(tiny_demo_data, tmp_path_factory):
    """The study killed (SIGKILL to its process group) once the first run's evaluation is
    written, then run again to the end, then a third time."""
    work = tmp_path_factory.mktemp('study')
    first_metrics = work / 'runs' / 'tiny_demo__afno' / 'seed0' / 'eval_1x'
    env = dict(os.environ, OMP_NUM_THREADS='1')
    process = subprocess.Popen([sys.executable, *study_args(work, tiny_demo_data)], cwd=ROOT,
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
    deadline = time.monotonic() + 400
    while not list(first_metrics.glob('*/*.json')):
        assert process.poll() is None, process.stdout.read()[-3000:]
        assert time.monotonic() < deadline, 'the first evaluation never appeared'
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = {str(p): p.stat().st_mtime for p in (work / 'runs' / 'tiny_demo__afno').rglob('*')}
    resumed = run_study_here(*study_args(work, tiny_demo_data)[1:])
    again = run_study_here(*study_args(work, tiny_demo_data)[1:])
    return dict(work=work, before=before, resumed=resumed, again=again, data=tiny_demo_data)


@pytest.mark.slow
def test_killed_study_resumes_without_redoing_finished_runs(killed_and_resumed):
    work = killed_and_resumed['work']
    assert 'tiny_demo__afno seed 0: finished earlier' in killed_and_resumed['resumed'].stdout
    assert 'trained 1, evaluated 1, skipped 1' in killed_and_resumed['resumed'].stdout
    afno_train_log = (work / 'logs' / 'tiny_demo__afno_s0_train.log').read_text()
    assert afno_train_log.count('study_jobs train') == 1  # trained once, never again
    steps = [line for log in (work / 'logs').glob('*.log') if log.name != 'benchmark.log'
             for line in log.read_text().splitlines() if line.startswith('$ ')]
    assert len(steps) >= 6  # train, evaluate, FLOPs of each row: by module name, no tools/ script
    assert all(' -m afno_seg.experiments.study_jobs ' in step and 'tools/' not in step
               for step in steps)
    after = {str(p): p.stat().st_mtime for p in (work / 'runs' / 'tiny_demo__afno').rglob('*')}
    assert after == killed_and_resumed['before']  # nothing of the finished run was redone
    # the third invocation finds everything finished
    again = killed_and_resumed['again'].stdout
    assert again.count('finished earlier (metrics found), skipped') == 2
    assert 'trained 0, evaluated 0, skipped 2' in again


@pytest.mark.slow
def test_study_table_rows_match_the_configs_and_the_flop_tool(killed_and_resumed, tmp_path):
    work = killed_and_resumed['work']
    get_flops = load_script('tools/analysis/get_flops.py')
    with open(work / 'study.csv') as f:
        records = list(csv.DictReader(f))
    assert [r['row'] for r in records] == ['tiny_demo__afno', 'tiny_demo__esa']
    assert [r['mixer'] for r in records] == ['afno', 'esa']
    for record in records:
        derived = work / 'configs' / f"{record['row']}.py"
        mixers = Config.fromfile(str(derived)).model.backbone.mixers
        assert {m['type'] for m in mixers} == {mixer_variants()[record['mixer']]['type']}
        result = get_flops.analyze_config(str(derived), (64, 64))
        summary = summarize(result)
        for key in ('total_gflops', 'mixer_gflops', 'params_m'):
            assert float(record[key]) == pytest.approx(summary[key], rel=1e-5), key
        metrics = sorted((work / 'runs' / record['row'] / 'seed0' / 'eval_1x').glob('*/*.json'))
        assert float(record['miou_1x']) == pytest.approx(json.loads(metrics[-1].read_text())
                                                         ['mIoU'], abs=1e-6)
        assert float(record['iou_road']) >= 0  # per-class IoU parsed from the eval log
    assert float(records[1]['step_vs_esa']) == 1.0
    assert float(records[0]['step_vs_esa']) > 0
    table = (work / 'study.md').read_text()
    assert table.count('\n| afno |') == 1 and table.count('\n| esa |') == 1
    assert (work / 'miou_vs_mixer_gflops.png').stat().st_size > 0


@pytest.mark.slow
def test_spectrum_of_study_checkpoints_feeds_the_table_and_compares(killed_and_resumed,
                                                                    tmp_path):
    work, data = killed_and_resumed['work'], killed_and_resumed['data']
    spectrum = load_script('tools/analysis/spectrum.py')
    dirs = []
    for row in ('tiny_demo__afno', 'tiny_demo__esa'):
        dirs.append(work / 'runs' / row / 'seed0' / 'spectrum')
        spectrum.main([str(work / 'configs' / f'{row}.py'),
                       str(work / 'runs' / row / 'seed0' / 'train' / 'iter_2.pth'),
                       '--out-dir', str(dirs[-1]), '--num-images', '1', '--cfg-options',
                       f'test_dataloader.dataset.data_root={data}/'])
    results = json.loads((dirs[0] / 'spectrum.json').read_text())
    assert len(results['afno']['layers']) == 8  # 2 layers x 4 stages of the tiny demo
    assert (dirs[0] / 'afno_sparsity.png').is_file() and (dirs[1] / 'erf.png').is_file()
    load_script('tools/analysis/mixer_study.py').main(
        study_args(work, data, '--table-only')[1:])
    with open(work / 'study.csv') as f:
        records = list(csv.DictReader(f))
    assert float(records[0]['afno_sparsity']) == pytest.approx(results['afno']['sparsity_mean'],
                                                               rel=1e-5)
    assert records[1]['afno_sparsity'] == ''
    spectrum.main(['--compare', *map(str, dirs), '--labels', 'AFNO', 'ESA', '--out-dir',
                   str(tmp_path)])
    assert (tmp_path / 'erf_compare.png').is_file()
    assert (tmp_path / 'afno_sparsity_compare.png').is_file()
    with pytest.raises(UserError, match='spectrum.json not found'):
        spectrum.main(['--compare', str(tmp_path / 'none'), '--out-dir', str(tmp_path)])


def test_transplant_source_spec_trains_first_and_every_row_starts_from_it(tmp_path, capsys):
    study = load_script('tools/analysis/mixer_study.py')
    study.main([
        DEMO, '--mixers', 'afno', 'esa', '--seeds', '3', '4', '--work-dir', str(tmp_path),
        '--transplant-from', 'esa', '--print-slurm', '--cfg-options', 'train_cfg.max_iters=40',
        '--source-cfg-options', 'train_cfg.max_iters=160'])
    lines = capsys.readouterr().out.splitlines()
    source = tmp_path / 'source' / 'source__segformer_afno_demo__esa' / 'seed3' / 'train'
    assert f'--work-dir {source} ' in lines[0]  # the source first, at the first seed
    assert lines[0].endswith('train_cfg.max_iters=40 train_cfg.max_iters=160')
    assert lines[1].startswith('#')
    assert len(lines) == 6 and all(line.endswith(f'load_from={source}/iter_160.pth')
                                   for line in lines[2:])
    derived = Config.fromfile(str(tmp_path / 'configs' / 'source__segformer_afno_demo__esa.py'))
    assert {m['type'] for m in derived.model.backbone.mixers} == {'EfficientSelfAttentionMixer'}
    with pytest.raises(UserError, match='no such checkpoint'):
        study.main([DEMO, '--mixers', 'afno', '--work-dir', str(tmp_path), '--transplant-from',
                    str(tmp_path / 'missing.pth'), '--print-slurm'])


@pytest.mark.slow
def test_transplant_study_fine_tunes_every_row_from_the_checkpoint(tiny_trained, tiny_demo_data,
                                                                   tmp_path):
    """The tiny AFNO run as the source, ESA's attention put in its place, at a seed whose
    initialisation differs from the source's; 2 fine-tune iterations."""
    import torch
    source = tiny_trained.work_dir / 'iter_6.pth'
    root = str(tiny_demo_data) + '/'
    args = [TINY_CONFIG, '--mixers', 'esa', '--seeds', '1', '--work-dir', str(tmp_path),
            '--transplant-from', str(source), '--no-costs', '--cfg-options',
            *(f'{loader}.dataset.data_root={root}' for loader in ('train_dataloader',
                                                                   'val_dataloader',
                                                                   'test_dataloader')),
            'train_cfg.max_iters=2', 'param_scheduler.0.end=1', 'param_scheduler.1.begin=1',
            'param_scheduler.1.end=2', 'default_hooks.checkpoint.interval=2']
    first = run_study_here(*args)
    assert 'trained 1, evaluated 1' in first.stdout
    source_state = torch.load(source, map_location='cpu', weights_only=False)['state_dict']
    log = (tmp_path / 'logs' / 'tiny_demo__esa_s1_train.log').read_text()
    assert f'"load_from": "{source}"' in log.splitlines()[0]
    tuned = torch.load(tmp_path / 'runs' / 'tiny_demo__esa' / 'seed1' / 'train' / 'iter_2.pth',
                       map_location='cpu', weights_only=False)['state_dict']
    shared = [k for k in tuned if '.attn.' not in k
              and not k.endswith(('running_mean', 'running_var', 'num_batches_tracked'))]
    assert len(shared) > 50  # patch embeddings, norms, Mix-FFNs, the head
    for key in shared:  # 2 small steps away from the source, far from a seed-1 initialisation
        assert torch.allclose(tuned[key], source_state[key], atol=5e-3), key
    new = [k for k in tuned if '.attn.' in k]  # ESA's, which the AFNO source lacks
    assert new and not any(k in source_state for k in new)
    table = (tmp_path / 'study.md').read_text()
    assert f'Transplant: every run starts from `{source}`' in table
    assert '| reference |' in table
    again = run_study_here(*args)
    assert 'trained 0, evaluated 0, skipped 1' in again.stdout
