"""`perfsleuth run --measure N`: how many unprofiled steps are timed (the step time `diff` compares), half
before the recorded window and half after it; 20 by default on CI, where 8 leave a noise band too wide for a
regression gate to trip (issue 29)."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main
from perfsleuth.record.config import RunConfig, on_ci, unprofiled_steps
from perfsleuth.errors import UsageError

SCRIPTS = Path(__file__).resolve().parents[2] / "fixtures" / "scripts" / "cpu"


def test_measure_splits_the_steps_around_the_window_and_counts_the_untimed_start_up():
    assert RunConfig.split(20) == (11, 10) and RunConfig.measured(11, 10) == 20
    assert RunConfig.split(7) == (4, 4) and RunConfig.measured(4, 4) == 7
    assert RunConfig.split(2) == (2, 1)
    assert RunConfig.measured(RunConfig.wait, RunConfig.after) == 8  # the default: 4 timed before, 4 after
    with pytest.raises(UsageError, match="--measure must be at least 2"):
        RunConfig.split(1)


def test_the_ci_variable_raises_the_default_only():
    assert not on_ci({}) and not on_ci({"CI": ""}) and not on_ci({"CI": "false"}) and not on_ci({"CI": "0"})
    assert on_ci({"CI": "true"}) and on_ci({"CI": "1"}) and on_ci({"CI": "True"})
    assert unprofiled_steps(None, None, None, {}) == (RunConfig.wait, RunConfig.after) == (5, 4)
    assert unprofiled_steps(None, None, None, {"CI": "true"}) == RunConfig.split(RunConfig.measure_ci) == (11, 10)
    # what the user asked for wins over the CI default
    assert unprofiled_steps(6, None, None, {"CI": "true"}) == (4, 3)
    assert unprofiled_steps(None, 3, None, {"CI": "true"}) == (3, RunConfig.after)
    assert unprofiled_steps(None, None, 0, {"CI": "true"}) == (RunConfig.wait, 0)
    with pytest.raises(UsageError, match="--measure sets both --wait and --after"):
        unprofiled_steps(10, 2, None, {})


def test_measure_with_wait_is_one_line_and_exit_2():
    result = CliRunner().invoke(main, ["run", "--measure", "10", "--after", "2", str(SCRIPTS / "toy.py")])
    assert result.exit_code == 2
    assert result.stderr == ("perfsleuth: error: --measure sets both --wait and --after: give --measure, or --wait "
                             "and --after\n")


def test_on_ci_a_real_run_times_20_unprofiled_steps(tmp_path):
    """CI=true and no schedule options: 10 steps timed before the window, 10 after, and the report's unprofiled
    step time pools them (less any leading warm-up step the steady-state rule leaves out)."""
    result = CliRunner().invoke(main, ["run", "--no-stack", "--warmup", "1", "--active", "2", "-o", str(tmp_path / "o"),
                                       str(SCRIPTS / "dataloader_starved.py"), "--steps", "40", "--delay", "0.001"],
                                env={"CI": "true"}, catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    m = json.loads((tmp_path / "o" / "report.json").read_text())["measurement"]
    assert m["before"]["n"] + m["after"]["n"] + m["unprofiled_warmup_steps"] == 20
    assert m["after"]["n"] + m["before"]["n"] == m["unprofiled_step_us"]["n"] >= 18
    assert "stopped the script after step 27 (profiled 2)" in result.stderr  # 11 + 1 + 2 + 10 + 3 memory steps
