"""Lines of docstrings and comments per line of code, per package (issue 21's documentation budget).

    python tools/analysis/doc_ratio.py afno_seg/mixers afno_seg/backbones [--exclude NAME.py]

A docstring line is a line spanned by a module, class or function docstring; a comment line holds a
``#`` comment (a code line with a trailing comment counts as both); a code line holds any other
token. Blank lines count as neither.
"""
import argparse
import ast
import io
import tokenize
from pathlib import Path

SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
           tokenize.ENCODING, tokenize.ENDMARKER}


def count(path: Path) -> tuple[int, int]:
    """``(docstring + comment lines, code lines)`` of one file."""
    text = path.read_text()
    docs = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
                    isinstance(first.value.value, str):
                docs.update(range(first.lineno, first.end_lineno + 1))
    comments, code = set(), set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comments.add(token.start[0])
        elif token.type not in SKIPPED and token.start[0] not in docs:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(docs | comments), len(code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('packages', nargs='+', type=Path)
    parser.add_argument('--exclude', nargs='*', default=[], help='file names to leave out')
    args = parser.parse_args()
    for package in args.packages:
        files = [p for p in sorted(package.glob('*.py')) if p.name not in args.exclude]
        docs, code = map(sum, zip(*(count(p) for p in files)))
        print(f'{package}: {docs} doc/comment lines, {code} code lines, ratio {docs / code:.2f}')


if __name__ == '__main__':
    main()
