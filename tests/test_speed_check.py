"""benchmarks/speed_check.py, the speed step of .ci/run: its verdict and its recorded ratios."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "speed_check", ROOT / "benchmarks" / "speed_check.py"
)
speed_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(speed_check)


def test_a_ratio_fails_only_above_one_and_a_half_times_its_record():
    recorded = {"type2_over_fastrvm": 0.8, "mcmc_first_over_fastrvm": 100.0}
    same = dict(recorded)
    assert speed_check.check(same, recorded) == []
    edge = {"type2_over_fastrvm": 1.19, "mcmc_first_over_fastrvm": 149.0}
    assert speed_check.check(edge, recorded) == []
    slower = {"type2_over_fastrvm": 1.3, "mcmc_first_over_fastrvm": 149.0}
    (line,) = speed_check.check(slower, recorded)
    assert line == "type2_over_fastrvm is 1.3, 1.62x the recorded 0.8 (allowed: 1.5x)"
    both = {"type2_over_fastrvm": 1.3, "mcmc_first_over_fastrvm": 151.0}
    assert [s.split()[0] for s in speed_check.check(both, recorded)] == list(speed_check.RATIOS)


def test_the_recorded_ratios_are_there_and_positive():
    recorded = json.loads(speed_check.RECORD.read_text())
    assert all(recorded[name] > 0 for name in speed_check.RATIOS)
