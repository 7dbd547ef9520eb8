"""The mixer study's seed-noise verdict: a paired t interval of each row's mIoU minus ESA's, seeds
paired by number, checked against scipy's paired t-test; the table built from run folders and an
earlier study.csv shows it per row."""
import csv
import json
import math
import random

import pytest
from scipy import stats

from afno_seg.experiments.study import StudyOptions
from afno_seg.experiments.study_plan import Row, plan_runs
from afno_seg.experiments.study_table import collect_records, table_markdown, write_csv, write_plots
from afno_seg.experiments.study_verdict import paired_difference, verdict


@pytest.mark.parametrize('case', range(40))
def test_interval_and_verdict_agree_with_scipys_paired_t_test(case):
    rng = random.Random(case)
    n = rng.choice([2, 3, 5])
    shift = rng.choice([0.0, 0.5, 3.0, -3.0])
    reference = {seed: rng.gauss(10, 2) for seed in range(n)}
    row = {seed: value + shift + rng.gauss(0, 1) for seed, value in reference.items()}
    result = paired_difference(row, reference)
    seeds = sorted(reference)
    test = stats.ttest_rel([row[s] for s in seeds], [reference[s] for s in seeds])
    low, high = test.confidence_interval(0.95)
    assert result.pairs == n
    assert result.mean == pytest.approx(sum(row[s] - reference[s] for s in seeds) / n)
    assert (result.low, result.high) == pytest.approx((low, high), rel=1e-9)
    expected = ('within seed noise' if test.pvalue >= 0.05 else
                'above ESA' if result.mean > 0 else 'below ESA')
    assert verdict(result) == expected


def test_seeds_pair_by_number_not_by_position():
    reference = {0: 12.0, 1: 8.0, 2: 10.0}
    row = {2: 11.0, 1: 9.1, 0: 12.9, 7: 1.0}  # seed 7 has no partner: left out
    result = paired_difference(row, reference)
    assert result.pairs == 3 and result.mean == pytest.approx(1.0)
    assert verdict(result) == 'above ESA'  # differences 0.9, 1.1, 1.0: clearly above
    unpaired = stats.ttest_ind(list(row.values())[:3], list(reference.values()))
    assert unpaired.pvalue > 0.05  # the same numbers unpaired are noise: pairing is what decides
    assert verdict(paired_difference(reference, row)) == 'below ESA'


def test_no_verdict_without_two_paired_seeds():
    one = paired_difference({0: 11.0, 1: 9.0}, {1: 8.0, 2: 7.0})
    assert one.pairs == 1 and one.mean == 1.0 and math.isnan(one.low)
    assert verdict(one) == 'no verdict (1 seed paired with ESA)'
    none = paired_difference({0: 11.0}, {1: 8.0})
    assert none.pairs == 0 and math.isnan(none.mean)
    assert verdict(none) == 'no verdict (0 seeds paired with ESA)'


def _write_metrics(run, miou: float) -> None:
    folder = run.eval_dir(1.0) / '20261206_000000'
    folder.mkdir(parents=True)
    (folder / '20261206_000000.json').write_text(json.dumps({'mIoU': miou}))


def test_table_gives_each_row_its_verdict_and_marks_earlier_numbers(tmp_path):
    rows = [Row(f'demo__{name}', 'demo.py', 'demo.py', name)
            for name in ('esa', 'afno', 'pool', 'gfn')]
    runs = plan_runs(rows, [0, 1, 2], tmp_path)
    measured = {'demo__esa': [11.0, 8.0, 10.0], 'demo__afno': [13.0, 10.2, 11.9],
                'demo__gfn': [None, None, 9.4]}
    for run in runs:
        if measured.get(run.row.row_id, [None] * 3)[run.seed] is not None:
            _write_metrics(run, measured[run.row.row_id][run.seed])
    earlier = tmp_path / 'earlier.csv'
    with open(earlier, 'w', newline='') as f:  # pool's runs are only in an earlier table
        writer = csv.DictWriter(f, ['row', 'seeds', 'miou_1x_runs', 'iou_road', 'mixer_gflops',
                                    'step_vs_esa', 'afno_sparsity'])
        writer.writeheader()
        writer.writerow(dict(row='demo__pool', seeds='2;0;1', miou_1x_runs='14.00;15.00;4.00',
                             iou_road='60.5', mixer_gflops='1.25', step_vs_esa='0.75',
                             afno_sparsity='nan'))
        writer.writerow(dict(row='demo__afno', seeds='0;1;2', miou_1x_runs='1.0;1.0;1.0',
                             mixer_gflops='13.5'))  # its mIoU is measured here: not read
        writer.writerow(dict(row='demo__gfn', seeds='0;1;5', miou_1x_runs='10.5;7.5;1.0',
                             iou_road='61.0'))  # seed 2 run here, seed 5 not in the study
    options = StudyOptions(tmp_path, seeds=[0, 1, 2], costs=False, earlier_csv=str(earlier))
    records = {r['row']: r for r in collect_records(rows, runs, options)}
    assert records['demo__esa']['verdict'] == 'reference'
    assert records['demo__afno']['verdict'] == 'above ESA'
    assert records['demo__afno']['delta_vs_esa'] == pytest.approx(2.0333333)
    pool = records['demo__pool']
    assert pool['from_earlier'] == 'mIoU 1x seeds 0 1 2;mixer_gflops;step_vs_esa'
    assert pool['iou_road'] == 60.5
    assert pool['mixer_gflops'] == 1.25 and pool['step_vs_esa'] == 0.75
    assert records['demo__afno']['from_earlier'] == 'mixer_gflops'
    assert pool['seeds'] == [0, 1, 2] and pool['delta_vs_esa'] == pytest.approx(4.0 / 3)
    assert pool['verdict'] == 'within seed noise'  # differences 4, -4, 4
    gfn = records['demo__gfn']  # seeds 0, 1 read, seed 2 measured: differences -0.5, -0.5, -0.6
    assert gfn['_by_seed'] == {0: 10.5, 1: 7.5, 2: 9.4} and gfn['iou_road'] == 61.0
    assert gfn['from_earlier'] == 'mIoU 1x seeds 0 1' and gfn['verdict'] == 'below ESA'
    table = table_markdown(list(records.values()), options)
    assert '| afno† | demo.py |' in table and '| 1.25 |' in table and 'above ESA |' in table
    assert '| pool† | demo.py |' in table and '(3) | 1.33 [' in table and '| reference |' in table
    assert '| esa | demo.py |' in table
    assert tmp_path / 'delta_vs_esa.png' in write_plots(list(records.values()), options, tmp_path)
    write_csv(list(records.values()), tmp_path / 'study.csv')
    with open(tmp_path / 'study.csv') as f:
        written = {r['row']: r for r in csv.DictReader(f)}
    assert written['demo__afno']['verdict'] == 'above ESA'
    assert '_by_seed' not in written['demo__afno']
    assert written['demo__pool']['seeds'] == '0;1;2'
