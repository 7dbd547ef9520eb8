"""What a mixer study runs: rows (a config, optionally with its mixers swapped), seeds, commands.

A *row* is one model of the table: a config as given, or the config with its backbone mixers
replaced by a *mixer spec* (``--mixers`` of ``tools/analysis/mixer_study.py``), written to
``configs/<row>.py`` in the work dir so that each run's exact model stays beside its checkpoints.
A *run* is one row at one seed: ``runs/<row>/seed<S>/train`` (the training work dir) and one
``tools/test.py`` work dir ``runs/<row>/seed<S>/eval_<scale>x`` per evaluation scale.
"""
from dataclasses import dataclass
from pathlib import Path

from mmengine.config import Config

from ..engine.atomic_io import atomic_write
from ..engine.errors import UserError
from ..engine.runner import load_config
from ..mixer_switch import parse_mixer_spec, spec_slug
from ..mixers import mixer_variants

__all__ = ['Row', 'Run', 'parse_mixer_spec', 'plan_rows', 'plan_runs', 'plan_source',
           'mixer_label', 'scale_options']


def mixer_label(mixers) -> str:
    """Short label of a backbone's mixers: ``AFNO`` or ``AFNO/AFNO/EfficientSelfAttention/...``."""
    mixers = [mixers] if isinstance(mixers, dict) else list(mixers)
    names = [str(m['type']).replace('Mixer', '') for m in mixers]
    return names[0] if len(set(names)) == 1 else '/'.join(names)


@dataclass
class Row:
    """One model of the study table."""
    row_id: str  # its folder under runs/, unique in the study
    config: str  # as given
    train_config: str  # ``config`` or the one derived from it with the spec's mixers
    label: str  # the mixers, for the table


@dataclass
class Run:
    """One row at one seed, with its directories."""
    row: Row
    seed: int
    root: Path

    @property
    def train_dir(self) -> Path:
        return self.root / 'train'

    def eval_dir(self, scale: float) -> Path:
        return self.root / f'eval_{scale:g}x'

    @property
    def name(self) -> str:
        return f'{self.row.row_id} seed {self.seed}'


def derived_config_text(base: str, mixers: list[dict]) -> str:
    """Text of a config that inherits ``base`` and replaces its backbone's mixers."""
    listed = ',\n'.join(f'    {m!r}' for m in mixers)
    return (f'# Written by tools/analysis/mixer_study.py: {Path(base).name} with its mixers '
            'replaced.\n'
            f'_base_ = [{str(Path(base).resolve())!r}]\n'
            f'model = dict(backbone=dict(mixers=[\n{listed},\n]))\n')


def write_once(path: Path, text: str) -> None:
    """Write a derived config (atomically: a study in another process may be reading it) unless
    it exists. A study's rows are fixed when first planned: its runs were trained from these
    files, so a later change of the catalogue does not rewrite them (a note says so)."""
    if path.is_file():
        if path.read_text() != text:
            print(f'note: {path} differs from what the catalogue gives now; the study keeps it '
                  '(its runs were trained from it). Use a new --work-dir for the new definition.',
                  flush=True)
        return
    atomic_write(text, path)


def plan_rows(configs: list[str], specs: list[str] | None, work_dir: Path,
              cost_config: str | None = None) -> list[Row]:
    """The study's rows: each config as it is, or each config x each mixer spec (derived configs
    written to ``work_dir/configs``; with ``cost_config``, also ``cost_<row>.py`` there: the cost
    config with the row's mixers)."""
    rows, variants = [], mixer_variants() if specs else {}
    config_dir = work_dir / 'configs'
    for config in configs:
        stem, base_cfg = Path(config).stem, load_config(config)
        num_stages = base_cfg.model.backbone.get('num_stages', 4)
        for spec in (specs or [None]):
            if spec is None:
                mixers = base_cfg.model.backbone.get('mixers') or dict(
                    type='EfficientSelfAttentionMixer')
                row = Row(stem, config, config, mixer_label(mixers))
                stage_mixers = [mixers] * num_stages if isinstance(mixers, dict) else mixers
            else:
                stage_mixers = parse_mixer_spec(spec, variants, num_stages)
                row_id = f'{stem}__{spec_slug(spec)}'
                path = config_dir / f'{row_id}.py'
                write_once(path, derived_config_text(config, stage_mixers))
                row = Row(row_id, config, str(path), spec)
            if cost_config:
                write_once(config_dir / f'cost_{row.row_id}.py',
                           derived_config_text(cost_config, [dict(m) for m in stage_mixers]))
            rows.append(row)
    ids = [row.row_id for row in rows]
    if len(set(ids)) != len(ids):
        raise UserError('two rows of the study share a name (the same config given twice?): '
                        f'{", ".join(sorted({i for i in ids if ids.count(i) > 1}))}')
    return rows


def cost_config_of(row: Row, work_dir: Path, cost_config: str | None) -> str:
    """The config whose costs are measured for ``row``."""
    return str(work_dir / 'configs' / f'cost_{row.row_id}.py') if cost_config else \
        row.train_config


def plan_runs(rows: list[Row], seeds: list[int], work_dir: Path) -> list[Run]:
    """Every row at every seed, seeds inner (so a row's seeds finish together)."""
    return [Run(row, seed, work_dir / 'runs' / row.row_id / f'seed{seed}')
            for row in rows for seed in seeds]


def plan_source(config: str, spec: str, work_dir: Path, seed: int) -> Run:
    """The transplant's source: ``config`` with the mixers of ``spec``, trained once at ``seed``
    in ``work_dir/source/<id>/seed<S>``, its config ``work_dir/configs/<id>.py``, ``<id>`` =
    ``source__<config stem>__<spec>``."""
    stem, slug = Path(config).stem, spec_slug(spec)
    mixers = parse_mixer_spec(spec, mixer_variants(),
                              load_config(config).model.backbone.get('num_stages', 4))
    path = work_dir / 'configs' / f'source__{stem}__{slug}.py'
    write_once(path, derived_config_text(config, mixers))
    row = Row(f'source__{stem}__{slug}', config, str(path), f'{spec} (source)')
    return Run(row, seed, work_dir / 'source' / row.row_id / f'seed{seed}')


def scale_options(cfg: Config, scale: float) -> list[str]:
    """``--cfg-options`` that evaluate at ``scale`` times the config's test resolution (the
    ``scale`` of the test pipeline's ``Resize`` step)."""
    if scale == 1:
        return []
    for index, step in enumerate(cfg.test_dataloader.dataset.pipeline):
        if step.get('type') == 'Resize' and 'scale' in step:
            width, height = step['scale']
            return [f'test_dataloader.dataset.pipeline.{index}.scale='
                    f'({round(width * scale)},{round(height * scale)})']
    raise UserError('--eval-scales other than 1 need a Resize step with a scale in '
                    'test_dataloader.dataset.pipeline of the config')
