"""diff's memory: both sides' peaks and growth per device, and `--fail-on-memory-regression PCT`."""

from click.testing import CliRunner
from memorybuilder import leaky
from perfsleuth.cli.main import main
from perfsleuth.render.memory_diff import memory_change, memory_failures


def _write(tmp_path, name, **kw):
    return str(leaky(steps=4, base=0, **kw).write(tmp_path / name))


def test_diff_shows_peak_and_growth_change_and_the_gate_trips(tmp_path):
    base = _write(tmp_path, "base.json.gz", leak=0, temp=1000)
    head = _write(tmp_path, "head.json.gz", leak=0, temp=1200)
    runner = CliRunner()
    ok = runner.invoke(
        main,
        [
            "diff",
            base,
            head,
            "--json",
            str(tmp_path / "d.json"),
            "--fail-on-memory-regression",
            "25%",
        ],
    )
    assert ok.exit_code == 0, ok.output
    line = "memory cuda:0: peak 1000 B → 1.17 KiB (+20.0%), growth 0 B → 0 B per step"
    assert line in ok.output
    bad = runner.invoke(main, ["diff", base, head, "--fail-on-memory-regression", "10%"])
    assert bad.exit_code == 1
    assert (
        "peak memory on cuda:0 1000 B → 1.17 KiB (+20.0%) exceeds --fail-on-memory-regression 10%"
        in bad.output
    )


def test_memory_change_numbers_and_a_side_without_memory():
    def rep(peak, growth):
        return {
            "memory": {
                "devices": [
                    {
                        "device": "cuda:0",
                        "peak_allocated_bytes": peak,
                        "growth_bytes_per_step": growth,
                    }
                ]
            }
        }

    change = memory_change(rep(1000, 0), rep(1500, 64))
    assert change["devices"] == [
        {
            "device": "cuda:0",
            "base_peak_allocated_bytes": 1000,
            "head_peak_allocated_bytes": 1500,
            "base_growth_bytes_per_step": 0,
            "head_growth_bytes_per_step": 64,
            "peak_change_bytes": 500,
            "peak_change": 0.5,
            "growth_change_bytes": 64,
        }
    ]
    assert memory_failures(change, 0.6) == [] and len(memory_failures(change, 0.4)) == 1
    one_sided = memory_change({"memory": None}, rep(1500, 0))
    assert memory_failures(one_sided, 0.1) == [
        "--fail-on-memory-regression: the base has no memory events "
        "(record with profile_memory=True)"
    ]
    assert memory_change({}, {}) is None
    assert memory_failures(None, 0.1) == [
        "--fail-on-memory-regression: neither side has memory events "
        "(record with profile_memory=True)"
    ]


def test_bad_memory_threshold_is_one_line_and_exit_2(tmp_path):
    base = _write(tmp_path, "b.json.gz", leak=0)
    r = CliRunner().invoke(main, ["diff", base, base, "--fail-on-memory-regression", "10"])
    assert r.exit_code == 2 and "--fail-on-memory-regression: '10' is ambiguous" in r.output
