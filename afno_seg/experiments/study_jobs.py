"""The study's steps, each run in a process of its own by module name:
``python -m afno_seg.experiments.study_jobs JOB '{"keyword": value, ...}'`` (:data:`JOBS`).

A process per step: a clean allocator per training, and a SIGTERM or kill of the study loses
only the step in flight (a training saves its checkpoint, exit 75). Each job does what its tool
does, from the same library functions; a failure is one line, status 1.
"""
import json
import sys
from argparse import Namespace
from pathlib import Path

__all__ = ['JOBS', 'evaluate', 'flops', 'parsed_cfg_options', 'spectrum', 'train']


def parsed_cfg_options(raw: list[str]) -> dict:
    """``key=value`` strings parsed by mmengine's ``DictAction``, as ``--cfg-options`` is."""
    from mmengine.config import DictAction
    parsed = Namespace()
    DictAction([], 'options')(None, parsed, raw)  # the public argparse Action call
    return parsed.options


def train(config: str, work_dir: str, cfg_options: list[str], resume: bool = False,
          launcher: str = 'none', load_from: str | None = None) -> None:
    """``tools/train.py CONFIG --work-dir W [--resume] [--launcher L] --cfg-options ...
    [load_from=CHECKPOINT]`` (a transplant: the tensors of the config's new mixers stay as
    initialised, mmengine names them)."""
    from ..engine import run_train
    options = parsed_cfg_options(cfg_options)
    if load_from:
        options['load_from'] = load_from
    run_train(config, work_dir, options, launcher=launcher, resume=resume)


def evaluate(config: str, checkpoint: str, work_dir: str, cfg_options: list[str]) -> None:
    """``tools/test.py CONFIG CHECKPOINT --work-dir W --cfg-options ...``: metrics JSON and the
    log with the per-class table in ``W/<timestamp>/``."""
    from ..engine import run_test
    run_test(config, checkpoint, work_dir, parsed_cfg_options(cfg_options))


def spectrum(config: str, checkpoint: str, out_dir: str, cfg_options: list[str],
             num_images: int = 4) -> None:
    """``tools/analysis/spectrum.py CONFIG CHECKPOINT --out-dir D --num-images N``."""
    from .spectrum_run import run_spectrum
    _, written = run_spectrum(config, checkpoint, out_dir, num_images=num_images,
                              cfg_options=parsed_cfg_options(cfg_options))
    print('\n'.join(f'wrote {path}' for path in written))


def flops(config: str, out: str, shape: list[int] | None = None) -> None:
    """``tools/analysis/get_flops.py CONFIG --out OUT [--shape H W]``."""
    from ..analysis.config_cost import analyze_config, image_shape
    from ..analysis.report import breakdown_markdown, summarize, write_report
    hw = image_shape(shape or [1024, 1024])
    result = analyze_config(config, hw)
    result['summary'] = summarize(result)
    markdown = breakdown_markdown(result, f'{Path(config).name} at {hw[0]}x{hw[1]}')
    print(markdown)
    print('\n'.join(f'wrote {path}' for path in write_report(out, result, markdown)))


JOBS = dict(train=train, evaluate=evaluate, spectrum=spectrum, flops=flops)


def _main() -> None:
    from ..deployment.startup import quiet_known_warnings
    from ..engine import UserError
    quiet_known_warnings()  # mmengine's Config.fromfile imports pkg_resources for mmseg:: bases
    if len(sys.argv) != 3 or sys.argv[1] not in JOBS:
        raise UserError(f'usage: python -m {__spec__.name} JOB JSON_KWARGS, JOB one of '
                        f'{sorted(JOBS)}')
    JOBS[sys.argv[1]](**json.loads(sys.argv[2]))


if __name__ == '__main__':  # importing afno_seg (the parent package) registered everything
    from ..engine import run_tool
    sys.exit(run_tool(_main))
