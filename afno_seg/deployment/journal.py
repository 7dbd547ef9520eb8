"""The journals of folder inference: what a run wrote, so that a rerun redoes nothing.

Each process appends one JSON line per input to ``OUT/.progress/RUN-rankR.jsonl``; the first line
names the process and the run's :func:`settings_key`. :func:`completed_inputs` reads them back for
a run of one key; a damaged line is named on stderr and skipped, never a traceback.
"""
import glob
import hashlib
import json
import os.path as osp
import sys

__all__ = ['OUTPUT_KEYS', 'PROGRESS_DIR', 'completed_inputs', 'settings_key']

PROGRESS_DIR = '.progress'
OUTPUT_KEYS = ('label', 'overlay', 'video')


def settings_key(settings: dict) -> str:
    """16 hex digits naming what decides a run's outputs (a journal is trusted only by runs of
    the same key)."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _journal_entries(journal: str) -> tuple[dict | None, list[dict]]:
    """``(header, entries)`` of one journal; damaged lines (not UTF-8, not JSON, not an entry)
    are named on stderr, a last line cut by a kill is skipped silently."""
    with open(journal, 'rb') as file:
        lines = file.read().split(b'\n')
    header, entries, damaged = None, [], []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line.decode('utf-8'))
            valid = isinstance(entry, dict) and (('input' not in entry and number == 1) or (
                isinstance(entry.get('input'), str) and entry.get('status') in ('ok', 'failed')
                and all(isinstance(entry.get(key, ''), str)
                        for key in (*OUTPUT_KEYS, 'real', 'error'))))
        except ValueError:  # UnicodeDecodeError included
            valid = False
        if not valid:
            if number < len(lines):  # the final line without its newline: a cut write
                damaged.append(number)
        elif 'input' in entry:
            entries.append(entry)
        else:
            header = entry
    if damaged:
        print(f'{journal}: {len(damaged)} damaged line(s) skipped (first: line {damaged[0]}); '
              'their inputs are redone', file=sys.stderr, flush=True)
    return header, entries


def completed_inputs(out_dir: str, run_id: str = '', settings: str = '') -> dict[str, dict]:
    """``{real input path: entry}`` of every journal under ``out_dir`` written with ``settings``
    (:func:`settings_key`), the latest line of each input winning; ``ok`` entries whose outputs
    are gone are dropped; ``ok`` entries from another run's journal than ``run_id``'s get
    ``resumed=True``."""
    entries = {}
    for journal in sorted(glob.glob(osp.join(out_dir, PROGRESS_DIR, '*.jsonl')), key=osp.getmtime):
        earlier = not osp.basename(journal).startswith(f'{run_id}-rank')
        header, lines = _journal_entries(journal)
        if (header or {}).get('settings', '') != settings:
            continue  # another checkpoint, config, format...: its outputs are not this run's
        for entry in lines:
            if earlier and entry['status'] == 'ok':
                entry['resumed'] = True
            entries[entry.get('real') or osp.realpath(entry['input'])] = entry
    return {path: entry for path, entry in entries.items() if entry['status'] != 'ok' or all(
        osp.isfile(entry[key]) for key in OUTPUT_KEYS if key in entry)}
