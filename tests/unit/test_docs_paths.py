"""The guides name no path of the machine they were written or measured on (issue 37:
docs/accuracy.md named /tmp/... and /work/... folders): placeholders (DIR, WORKDIR, "$VENV")
instead, and the benchmarks that write their commands into the docs write the placeholders too."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench  # noqa: E402
import unseen  # noqa: E402

# An absolute path under a folder that belongs to one machine (a temp dir, a home, a work or a
# mount folder).
MACHINE_PATH = re.compile(
    r"(?<![\w.~$/-])/(?:tmp|work|home|root|Users|mnt|scratch|private/var|var/folders)/")


def machine_paths(text: str) -> list:
    return [line.strip() for line in text.splitlines() if MACHINE_PATH.search(line)]


def test_the_pattern_finds_machine_paths_and_nothing_else():
    assert machine_paths("see /tmp/unseen-work/x\n`/work/venvs/a/bin/pip`\nok\n/home/me/runs") == [
        "see /tmp/unseen-work/x", "`/work/venvs/a/bin/pip`", "/home/me/runs"]
    assert machine_paths("/proc/stat, s3://bucket/tmp/x, ./tmp/x, WORKDIR/x.json, /path/to/runs, "
                         "~/tmp/") == []


def test_no_guide_names_a_path_of_this_machine():
    guides = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    assert len(guides) >= 10
    found = {p.name: machine_paths(p.read_text(encoding="utf-8")) for p in guides}
    assert {name: lines for name, lines in found.items() if lines} == {}


def test_benchmark_commands_written_into_the_docs_use_placeholders():
    argv = ["--examples", "/work/ext/examples", "--pairs", "7", "--keep", "/tmp/unseen-work",
            "--json=/tmp/r.json", "--programs", "dcgan"]
    assert unseen.portable(argv) == (
        "--examples DIR --pairs 7 --keep WORK --json=FILE --programs dcgan")
    assert bench.portable(["--times", "1", "2", "--hta-python", "/tmp/hta05/bin/python",
                           "--workdir", "/tmp/perfsleuth-bench", "--write", "docs/perf.md"]) == (
        "--times 1 2 --hta-python HTA/bin/python --workdir WORKDIR --write docs/perf.md")
