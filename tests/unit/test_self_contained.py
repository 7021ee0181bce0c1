"""A plain clone runs every test: the real traces the tests read are in the repository, each with its
source and licence, and nothing in tests/, fixtures/, scripts/ or benchmarks/ reads beside the checkout."""

import re

from conftest import REAL_TRACES, ROOT

README = REAL_TRACES / "README.md"


def test_every_real_trace_is_in_the_repository_with_its_source_licence_and_device():
    files = sorted(p.name for p in REAL_TRACES.iterdir() if p.name != "README.md")
    assert len(files) == 16 and all(name.endswith(".json.gz") for name in files)
    rows = {m.group(1): m.group(0) for m in re.finditer(r"^\| `([^`]+)` \|.*$", README.read_text(), re.M)}
    assert sorted(rows) == files
    for name, row in rows.items():
        cells = [c.strip() for c in row.strip("|").split("|")]
        source, licence, device = cells[1], cells[2], cells[3]
        assert source.split()[0] in ("HTA", "TraceLens") and source.split()[1].startswith("`tests/"), row
        assert licence.startswith("MIT"), row
        assert device, row
    # the traces are real files, not Git LFS pointers: a gzip header each
    assert all((REAL_TRACES / name).read_bytes()[:2] == b"\x1f\x8b" for name in files)


def test_nothing_reads_beside_the_checkout():
    outside = re.compile("|".join([re.escape("ROOT" + ".parent"), re.escape(".." + "/shared"),
                                   r'"shared"\s*/\s*"traces"', re.escape("parent.parent / " + '"shared')]))
    found = []
    for folder in ("tests", "fixtures", "scripts", "benchmarks", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in (".py", ".sh", "") and "corpus" not in path.parts:
                text = path.read_text(encoding="utf-8", errors="replace")
                found += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in outside.finditer(text)]
    assert found == []
