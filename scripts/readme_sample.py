"""The README's generated parts: the sample output is what its example command prints, the rule list is the
catalogue's. Regenerate them, or check them.

    python scripts/readme_sample.py            # rewrite the sample and the rule list in README.md
    python scripts/readme_sample.py --check    # exit 1, with a diff, when README.md is out of date

The sample is README.md's first fenced block that starts with `$ perfsleuth `; its first line is the
command, run here from the repository root with this interpreter (`python -m perfsleuth ...`). The
comparison ignores what legitimately varies between runs of the same code on the same trace: trailing
spaces (the terminal pads its table) and the version in the header line. tests/e2e/test_readme.py runs
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


def rule_list(text: str) -> tuple[str, str, int, int]:
    """(shown, generated, start, end) of the README's rule list: what it says between its markers, what the
    catalogue says (perfsleuth.engine.docs.rule_list), and where the text between the markers lies."""
    from perfsleuth.engine.catalog import load_catalog
    from perfsleuth.engine.docs import GENERATED_END, RULE_LIST_BEGIN, rule_list as generate

    start = text.index(RULE_LIST_BEGIN) + len(RULE_LIST_BEGIN) + 1
    end = text.index(GENERATED_END, start)
    return text[start:end], generate(load_catalog(())) + "\n", start, end


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    command, shown, m = sample(text)
    fresh = run(command)
    listed, rules, start, end = rule_list(text)
    if "--check" in argv:
        if normalised(shown) == normalised(fresh) and listed == rules:
            print("README.md's sample output matches `" + command + "`, its rule list the catalogue")
            return 0
        sys.stdout.writelines(difflib.unified_diff(normalised(shown).splitlines(True), normalised(fresh).splitlines(True),
                                                   "README.md", command))
        sys.stdout.writelines(difflib.unified_diff([listed], [rules], "README.md", "the catalogue"))
        print("README.md is out of date: python scripts/readme_sample.py rewrites the sample and the rule list")
        return 1
    text = text[:start] + rules + text[end:]
    m = sample(text)[2]
    README.write_text(text[: m.start(2)] + fresh + text[m.end(2):], encoding="utf-8")
    print(f"README.md: sample output of `{command}` rewritten ({len(fresh.splitlines())} lines), and the rule list")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
