"""The documentation cannot drift from the code.

Every ``python tools/...`` and ``bash tools/...`` command written in README.md, docs/ (and
data/README.md, BENCHMARKS.md) is parsed by the tool's own ``ArgumentParser`` (captured when the
tool builds it; parse only, the tool's work never runs); a shell launcher's arguments go to the
tool it starts, and the environment variables a command sets must be read somewhere. Every
repository path the pages name exists, every link lands on a file and, with ``#anchor``, on a
heading, and every ``make`` target exists; no page links to the SegFormer release's dead weight
hosts; a README block that trains says what data and weights it needs; ``make test`` says why
tests were skipped. Each check is shown to reject a broken line.
"""
import argparse
import functools
import glob
import importlib.util
import inspect
import itertools
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from afno_seg.mixers import mixer_variants

ROOT = Path(__file__).resolve().parents[1]
# The written pages (the tables the tools generate under docs/benchmarks, docs/study and
# docs/generated record the command that made them, as run then).
PAGES = [ROOT / 'README.md', ROOT / 'BENCHMARKS.md', ROOT / 'data' / 'README.md',
         *sorted((ROOT / 'docs').glob('*.md')), ROOT / 'docs' / 'study' / 'README.md']
USER_FACING = PAGES + [ROOT / 'CHANGELOG.md']

# Shell launchers: the tool each starts and how their positionals map onto its arguments
# (dist_train.sh CONFIG GPUS [args] -> train.py CONFIG [args]); the script must pass "${@:N}".
LAUNCHERS = {
    'tools/dist_train.sh': ('tools/train.py', (0,), 2),
    'tools/dist_test.sh': ('tools/test.py', (0, 1), 3),
    'tools/slurm_train.sh': ('tools/train.py', (2,), 3),
}
# Environment variables of the platform rather than of this project.
STANDARD_ENV = {'OMP_NUM_THREADS', 'CUDA_VISIBLE_DEVICES', 'PYTHONPATH', 'TORCH_CUDA_ARCH_LIST'}
# Files docs/adding_a_mixer.md tells the reader to create (tests/test_adding_a_mixer.py does).
EXAMPLE_FILES = {'afno_seg/mixers/local_conv.py', 'configs/_base_/mixers/local3.py',
                 'configs/segformer_local3_b3_cityscapes.py'}
PATH_RE = re.compile(r'(?<![\w./~$-])((?:afno_seg|configs|tools|tests|docs|data)/'
                     r'[\w.*{},<>/-]*[\w*}>/]|\.ci/run)')
FENCE_RE = re.compile(r'^ *```[^\n]*\n(.*?)^ *```', re.M | re.S)
INDENTED_RE = re.compile(r'^ {4,}\S.*(?:\\\n.*)*', re.M)
TERMINATORS = {';', '&&', '||', '|', '&', '>', '>>', '2>', '2>&1', '<'}


class _Captured(BaseException):
    """Raised from inside ``parse_known_args`` to hand back the parser a tool built."""

    def __init__(self, parser):
        super().__init__()
        self.parser = parser


@functools.cache
def tool_parser(script: str) -> argparse.ArgumentParser:
    """The ``ArgumentParser`` that ``script`` builds, captured at its first parse."""
    name = '_docs_' + re.sub(r'\W', '_', script)
    spec = importlib.util.spec_from_file_location(name, ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entry = getattr(module, 'parse_args', None) or module.main
    original = argparse.ArgumentParser.parse_known_args

    def capture(self, args=None, namespace=None):
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture
    try:
        entry(*([[]] if inspect.signature(entry).parameters else []))
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
    raise AssertionError(f'{script}: {entry.__name__}() parsed no arguments')


def parse_error(script: str, args: list[str]) -> str | None:
    """argparse's complaint about ``args`` for ``script``, or None when they parse."""
    parser = tool_parser(script)

    def fail(message):
        raise ValueError(message)

    parser.error = fail
    parser.allow_abbrev = False  # pages spell options out: a renamed one must not pass as a prefix
    try:
        parser.parse_args(args)
    except (ValueError, TypeError, SystemExit) as error:
        return str(error) or type(error).__name__
    return None


def expand(text: str, variables: dict[str, str]) -> str:
    """Shell variables replaced by the values a block assigned (unknown ones by ``1``)."""
    return re.sub(r'\$\{?([A-Za-z_]\w*|\d)\}?', lambda m: variables.get(m.group(1), '1'), text)


def code_lines(text: str) -> list[str]:
    """The shell lines of a page: fenced and indented blocks (assignments tracked, continuations
    joined, variables expanded) and inline code spans."""
    blocks = FENCE_RE.findall(text)
    prose = FENCE_RE.sub('', text)
    blocks += INDENTED_RE.findall(prose)
    prose = INDENTED_RE.sub('', prose)
    lines = []
    for block in blocks:
        variables = {}
        for line in block.replace('\\\n', ' ').splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            assigned = [w.rstrip(';') for w in words if re.fullmatch(r'[A-Za-z_]\w*=.*', w)]
            if words and len(assigned) == len(words):
                for word in assigned:
                    key, value = word.split('=', 1)
                    variables[key] = expand(value, variables)
            else:
                lines.append(expand(line, variables))
    lines += [expand(span.replace('\n', ' '), {}) for span in re.findall(r'`([^`]+)`', prose)]
    return lines


def commands_in(text: str) -> list[tuple[dict, list[str], bool]]:
    """``(environment, argv, elided)`` of every ``python tools/...``, ``python -m ...`` and
    ``bash tools/...`` command; argv starts at the script (or ``-m``) and stops at a ``...``
    that stands for more arguments (``elided``)."""
    found = []
    for line in code_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i, word in enumerate(words[:-1]):
            runner = word in ('bash', 'python', 'python3') or word.endswith('/python')
            nxt = words[i + 1]
            if not runner or not (nxt.startswith('tools/') or (nxt == '-m' and word != 'bash')):
                continue
            if '...' in nxt:
                continue  # `python tools/...`: a pattern, not a command
            argv, elided = [], False
            for arg in words[i + 1:]:
                if arg in TERMINATORS:
                    break
                if arg.startswith('...'):
                    elided = True
                    break
                argv.append(arg.rstrip(';'))
                if arg.endswith(';'):
                    break
            env = dict(w.split('=', 1) for w in itertools.takewhile(
                lambda w: re.fullmatch(r'[A-Z_][A-Z0-9_]*=\S*', w), reversed(words[:i])))
            found.append((env, argv, elided))
    return found


@functools.cache
def source_text(*roots: str) -> str:
    return '\n'.join(p.read_text(errors='replace') for root in roots
                     for p in sorted((ROOT / root).rglob('*')) if p.suffix in ('.py', '.sh'))


def command_errors(env: dict, argv: list[str], elided: bool = False) -> list[str]:
    """What is wrong with one documented command (nothing: an empty list). With arguments
    elided, only the options shown are checked."""
    shown = shlex.join(argv)
    if argv[0] == '-m':
        module = argv[1] if len(argv) > 1 else ''
        return [] if importlib.util.find_spec(module) else [f'{shown}: no module {module}']
    script, args = argv[0], argv[1:]
    if not (ROOT / script).is_file():
        return [f'{shown}: {script} does not exist']
    errors = []
    text = (ROOT / script).read_text()
    for name in sorted(set(env) - STANDARD_ENV):
        if script.endswith('.sh'):
            read = re.search(r'\$\{?' + name + r'\b', text)
        else:
            read = re.search(r'\b' + name + r'\b', source_text('afno_seg', 'tools', 'configs'))
        if not read:
            errors.append(f'{shown}: {script} does not read the variable {name}')
    if script in LAUNCHERS:
        tool, kept, consumed = LAUNCHERS[script]
        assert Path(tool).name in text and f'"${{@:{consumed + 1}}}"' in text, (
            f'{script} no longer starts {tool} with "${{@:{consumed + 1}}}": update LAUNCHERS')
    if script.endswith('.py') and elided:
        known = tool_parser(script)._option_string_actions
        errors += [f'{shown}: {script} has no option {arg.split("=")[0]}' for arg in args
                   if arg.startswith('-') and arg.split('=')[0] not in known]
    elif script.endswith('.py'):
        error = parse_error(script, args)
        errors += [f'{shown}: {error}'] if error else []
    elif script in LAUNCHERS and elided:
        known = tool_parser(tool)._option_string_actions
        errors += [f'{shown}: {tool} has no option {arg}' for arg in args[consumed:]
                   if arg.startswith('-') and arg.split('=')[0] not in known]
    elif script in LAUNCHERS:
        if len(args) < consumed:
            return errors + [f'{shown}: {script} takes {consumed} positional arguments first']
        error = parse_error(tool, [args[i] for i in kept] + args[consumed:])
        errors += [f'{shown} (passed on to {tool}): {error}'] if error else []
    else:
        errors += [f'{shown}: {script} does not know {flag}'
                   for flag in args if flag.startswith('--') and flag not in text]
    return errors


def brace_expansions(path: str) -> list[str]:
    match = re.search(r'\{([^{}]*,[^{}]*)\}', path)
    if not match:
        return [path]
    return [expanded for option in match.group(1).split(',')
            for expanded in brace_expansions(path[:match.start()] + option + path[match.end():])]


def path_errors(text: str, skip_code_paths: bool = False) -> list[str]:
    """Repository paths named in ``text`` that do not exist."""
    errors = []
    for named in sorted(set(PATH_RE.findall(text))):
        if '<' in named or re.search(r'\{[^,}]*\}', named) or named in EXAMPLE_FILES:
            continue  # a placeholder, or a file the reader is told to create
        if named.startswith('data/') and named != 'data/README.md':
            continue  # datasets: ignored by git, the reader's own
        if skip_code_paths and named.startswith('afno_seg/'):
            continue
        for path in brace_expansions(named):
            if not (glob.glob(str(ROOT / path)) or glob.glob(str(ROOT / path) + '.*')):
                errors.append(f'{path} does not exist')
    return errors


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings."""
    anchors = set()
    for heading in re.findall(r'^#{1,6} +(.+?) *$', FENCE_RE.sub('', text), flags=re.M):
        slug = re.sub(r'[^\w\- ]', '', heading.lower()).replace(' ', '-')
        anchors.add(slug)
    return anchors


def link_errors(page: Path, text: str) -> list[str]:
    errors = []
    for target in re.findall(r'\]\(([^)\s]+)\)', FENCE_RE.sub('', text)):
        if re.match(r'[a-z]+://', target):
            continue
        file, _, anchor = target.partition('#')
        path = (page.parent / file).resolve() if file else page
        if not path.exists():
            errors.append(f'link {target}: {file} does not exist')
        elif anchor and anchor not in heading_anchors(path.read_text()):
            errors.append(f'link {target}: no heading with that anchor in {path.name}')
    return errors


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


@pytest.mark.parametrize('page', PAGES, ids=rel)
def test_every_documented_command_parses(page):
    commands = commands_in(page.read_text())
    errors = [error for command in commands for error in command_errors(*command)]
    assert not errors, f'{rel(page)}:\n' + '\n'.join(errors)


@pytest.mark.parametrize('page', PAGES, ids=rel)
def test_every_named_path_and_link_exists(page):
    text = page.read_text()
    # BENCHMARKS.md records what was measured: module paths there are the code of that date.
    errors = path_errors(text, skip_code_paths=page.name == 'BENCHMARKS.md')
    errors += link_errors(page, text)
    errors += [f'make {target}: no such target in the Makefile'
               for target in re.findall(r'(?:^|`)make ([a-z][\w-]*)', text, flags=re.M)
               if not re.search(rf'^{target}:', (ROOT / 'Makefile').read_text(), flags=re.M)]
    assert not errors, f'{rel(page)}:\n' + '\n'.join(errors)


def test_the_checks_reject_a_renamed_flag_a_moved_file_and_a_dead_link():
    """Negative controls: each check fails on a doc line that no longer matches the code."""
    def errors_of(doc):
        return [e for command in commands_in(doc) for e in command_errors(*command)]

    good = 'python tools/train.py configs/demo/segformer_afno_demo.py --work-dir w --resume'
    assert commands_in(f'```bash\n{good}\n```') and not errors_of(f'```bash\n{good}\n```')
    assert 'unrecognized arguments: --work-dirs' in errors_of(
        f"`{good.replace('--work-dir', '--work-dirs')}`")[0]
    assert 'tools/train2.py does not exist' in errors_of('`python tools/train2.py x`')[0]
    assert 'expected one argument' in errors_of(
        '```\nW=work_dirs/x\npython tools/test.py c $W/iter_4.pth --work-dir\n```')[0]
    assert not errors_of('`MAX_RESTARTS=2 bash tools/dist_train.sh c.py 8 --resume`')
    assert 'does not read the variable MAX_RESTART' in errors_of(
        '`MAX_RESTART=2 bash tools/dist_train.sh c.py 8`')[0]
    assert 'passed on to tools/train.py' in errors_of(
        '`bash tools/dist_train.sh c.py 8 --resum`')[0]
    assert errors_of('`python -m afno_seg.analysis.no_such_module`')
    assert not path_errors('`tools/analysis/get_flops.py`, `docs/benchmarks/mixers_cpu.{md,csv}`')
    assert path_errors('see `tools/analysis/get_flop.py`') == [
        'tools/analysis/get_flop.py does not exist']
    assert link_errors(ROOT / 'README.md', '[x](docs/flops.md#convention)') == []
    assert link_errors(ROOT / 'README.md', '[x](docs/flops.md#no-such-heading)')


def test_readme_is_the_front_door():
    readme = (ROOT / 'README.md').read_text()
    lines = readme.splitlines()
    assert len(lines) <= 150, f'README.md has {len(lines)} lines; move detail into docs/'
    assert '## Documentation' in lines[:60], 'the documentation index must be in the first 60 lines'
    # the test command is the one CI runs
    assert 'make test' in readme and re.search(r'^make test$', (ROOT / '.ci' / 'run').read_text(),
                                               flags=re.M)
    table = readme.split('## Two commands')[0]
    missing = [name for name in mixer_variants() if f'(`{name}`)' not in table]
    assert not missing, f'README.md: the mixer table lacks {missing} (catalogue variants)'
    # numbers that change with the code live in BENCHMARKS.md only
    assert not re.search(r'\b\d+ tests\b|\d+ min \d+ s', readme)


@pytest.mark.parametrize('page', USER_FACING, ids=rel)
def test_no_issue_numbers_or_closing_notes(page):
    hits = re.findall(r'.{0,30}(?:\bissue[- ]?#?\d+|closing note).{0,30}', page.read_text(),
                      flags=re.I)
    assert not hits, f'{rel(page)} refers to the tracker, not to the code: {hits}'


# The SegFormer release's weight links (its README's "Download ImageNet-1K pretrained weights"):
# Google Drive and OneDrive, gone (docs/configs.md, "MiT ImageNet weights", has what serves them).
DEAD_LINKS = re.compile(r'drive\.google\.com|onedrive\.live\.com|1drv\.ms|'
                        r'Download ImageNet-1K pretrained weights', re.I)
LINKED_PAGES = sorted({*PAGES, *(ROOT / 'docs').rglob('*.md')})


def dead_links(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if DEAD_LINKS.search(line)]


@pytest.mark.parametrize('page', LINKED_PAGES, ids=rel)
def test_no_page_sends_readers_to_a_known_dead_link(page):
    assert not dead_links(page.read_text()), f'{rel(page)}: {dead_links(page.read_text())}'


def test_the_dead_link_check_rejects_the_release_links():
    assert dead_links('weights: github.com/NVlabs/SegFormer, "Download ImageNet-1K pretrained '
                      'weights"\nor https://drive.google.com/drive/folders/x')
    assert not dead_links('`hf download nvidia/mit-b3`; licence: github.com/NVlabs/SegFormer')


def test_readme_training_commands_say_what_they_need():
    """A README block that trains names where its data and its pretrained weights come from (a
    comment or the commands that fetch them), unless it trains the demo config, which needs
    neither."""
    readme = (ROOT / 'README.md').read_text()
    silent = [block for block in FENCE_RE.findall(readme)
              if re.search(r'tools/(?:dist_|slurm_)?train\.(?:py|sh)', block)
              and 'configs/demo/' not in block
              and not (re.search(r'\bdata/(?!pretrained)\w', block) and 'data/pretrained' in block)]
    assert not silent, f'README.md: say what these need (data, MiT weights): {silent}'


def test_make_test_says_why_tests_were_skipped(tmp_path):
    """The command `make test` runs, on a file whose one test skips: the reason is printed
    (pytest's -q alone prints only a count)."""
    if shutil.which('make') is None:
        pytest.skip('make is not installed')
    dry_run = subprocess.run(['make', '-n', '-s', 'test', 'TEST_JOBS=0'], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
    command = next(shlex.split(line) for line in dry_run.splitlines() if ' -m pytest' in line)
    assert command[1:3] == ['-m', 'pytest'], command
    (tmp_path / 'test_skipping.py').write_text(
        "import pytest\n\n\ndef test_skips():\n    pytest.skip('Slurm is not installed')\n")
    result = subprocess.run([sys.executable, *command[1:], '-p', 'no:cacheprovider',
                             'test_skipping.py'], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'SKIPPED [1] test_skipping.py:5: Slurm is not installed' in result.stdout, result.stdout
