"""Print the mixer catalogue: every registered mixer variant with its class, module and arguments.

    python tools/analysis/list_mixers.py                  # Markdown table on stdout
    python tools/analysis/list_mixers.py --update docs/mixers.md
    python tools/analysis/list_mixers.py --write-configs configs/_base_/mixers

``--update FILE`` replaces the table between the lines ``<!-- mixer-catalogue:begin -->`` and
``<!-- mixer-catalogue:end -->`` of FILE (docs/mixers.md's table is kept that way, and a test
checks it is current). ``--write-configs DIR`` writes ``DIR/{name}.py``
(``{name}_mixer = dict(...)``) for every listed variant, from its class's declaration.
"""
import argparse
import sys
from pathlib import Path

from afno_seg.mixers.catalogue import base_config_text, catalogue_markdown, mixer_catalogue

BEGIN, END = '<!-- mixer-catalogue:begin -->', '<!-- mixer-catalogue:end -->'


def replace_table(text: str, table: str, path: str = 'the file') -> str:
    """``text`` with the block between the markers replaced by ``table``."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f'{path} needs one line {BEGIN} and, below it, one line {END}')
    head, rest = text.split(BEGIN)
    return head + BEGIN + '\n' + table + END + rest.split(END, 1)[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--update', metavar='FILE', help='rewrite the table in FILE')
    parser.add_argument('--write-configs', metavar='DIR', help='write the variant base configs')
    args = parser.parse_args(argv)
    if args.write_configs:
        for entry in mixer_catalogue():
            (Path(args.write_configs) / f'{entry.name}.py').write_text(base_config_text(entry))
        print(f'wrote {len(mixer_catalogue())} mixer configs to {args.write_configs}')
        return 0
    table = catalogue_markdown()
    if not args.update:
        print(table, end='')
        return 0
    path = Path(args.update)
    try:
        path.write_text(replace_table(path.read_text(), table, str(path)))
    except (OSError, ValueError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 1
    print(f'updated the mixer table in {path}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
