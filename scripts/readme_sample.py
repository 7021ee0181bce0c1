"""The README's sample output is what its example command prints. Regenerate it, or check it.

    python scripts/readme_sample.py            # rewrite the sample in README.md from a fresh run
    python scripts/readme_sample.py --check    # exit 1, with a diff, when README.md is out of date

The sample is README.md's first fenced block that starts with `$ perfsleuth `; its first line is the
command, run here from the repository root with this interpreter (`python -m perfsleuth ...`). The
comparison ignores what legitimately varies between runs of the same code on the same trace: trailing
spaces (the terminal pads its table) and the version in the header line. tests/test_readme.py runs
the check.
"""

from __future__ import annotations

import difflib
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_BLOCK = re.compile(r"^```\n(\$ perfsleuth [^\n]*)\n(.*?)^```$", re.S | re.M)
_VERSION = re.compile(r"^perfsleuth \d+\.\d+\.\d+\S* ", re.M)


def sample(text: str) -> tuple[str, str, re.Match]:
    """(command, output, match) of the README's sample block."""
    m = _BLOCK.search(text)
    if not m:
        raise SystemExit("README.md has no ``` block starting with `$ perfsleuth `")
    return m.group(1)[2:], m.group(2), m


def run(command: str) -> str:
    argv = shlex.split(command)
    done = subprocess.run([sys.executable, "-m", "perfsleuth", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"`{command}` exited {done.returncode}:\n{done.stderr}")
    return tidy(done.stdout)


def tidy(text: str) -> str:
    return "".join(line.rstrip() + "\n" for line in text.splitlines())


def normalised(text: str) -> str:
    """What must agree: the text without trailing spaces, the version in the header replaced."""
    return _VERSION.sub("perfsleuth VERSION ", tidy(text))


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    command, shown, m = sample(text)
    fresh = run(command)
    if "--check" in argv:
        if normalised(shown) == normalised(fresh):
            print("README.md's sample output matches `" + command + "`")
            return 0
        sys.stdout.writelines(difflib.unified_diff(normalised(shown).splitlines(True), normalised(fresh).splitlines(True),
                                                   "README.md", command))
        print("README.md is out of date: python scripts/readme_sample.py rewrites the sample")
        return 1
    README.write_text(text[: m.start(2)] + fresh + text[m.end(2):], encoding="utf-8")
    print(f"README.md: sample output of `{command}` rewritten ({len(fresh.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
