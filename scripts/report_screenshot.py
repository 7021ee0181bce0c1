"""docs/img/report.png: the top of the HTML report of a real trace, taken with headless Chromium,
and docs/img/report.json: what the picture shows and where it came from.

    python scripts/report_screenshot.py            # analyse the trace, render, screenshot, record
    python scripts/report_screenshot.py --check    # exit 1 when the picture is stale (below)

The record names the trace and its SHA-256, the PNG's SHA-256 and size, and the figures the picture
shows (verdict, its text, median step, device busy, the top finding and its number, the timeline's
step and note). `--check` (tests/unit/test_report_image.py) fails when the PNG is not the one recorded, or
today's analysis of the trace gives other figures than the picture shows: the image then is stale,
and this script, run again, makes it current.

Chromium: the Debian `chromium` and `chromedriver` (as tests/e2e/test_report_browser.py), 1100 px
wide.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import struct
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = "fixtures/traces/real/a100_trace_diff_control.json.gz"
PNG = ROOT / "docs" / "img" / "report.png"
RECORD = ROOT / "docs" / "img" / "report.json"
WIDTH, HEIGHT = 1100, 2000


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def figures(report: dict) -> dict:
    """What the top of the page shows, as the page words it (report/figures.py: every output's
    text)."""
    from perfsleuth.report import figures as words
    from perfsleuth.report.present import fmt_pct, fmt_us

    findings = [f for f in report.get("findings") or [] if isinstance(f, dict)]
    top = findings[0] if findings else None
    summary = report.get("summary") or {}
    return {
        "verdict": report.get("verdict"),
        "verdict_text": report.get("verdict_text"),
        "median_step": fmt_us((summary.get("step_time_us") or {}).get("median")),
        "device_busy": fmt_pct(summary.get("device_busy")),
        "top_finding": {
            "rule": top.get("rule"),
            "title": top.get("title"),
            "number": words.short_text(top),
            "saving": words.saving_text(top),
        }
        if top
        else None,
        "findings": [f.get("rule") for f in findings],
        "timeline_step": (report.get("timeline") or {}).get("step"),
        "timeline_note": (report.get("timeline") or {}).get("note"),
    }


def analyse() -> dict:
    from perfsleuth.api import analyze_file

    return analyze_file(ROOT / TRACE).to_dict()


def screenshot(report: dict, out: Path) -> None:
    from perfsleuth.render.outputs import write_outputs
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    work = Path(tempfile.mkdtemp(prefix="perfsleuth-shot-"))
    try:
        shutil.copy(
            ROOT / TRACE, work / Path(TRACE).name
        )  # the report beside its trace, as a user has it
        report = {**report, "trace": {**report["trace"], "path": str(work / Path(TRACE).name)}}
        write_outputs(report, out_dir=work / "out")
        opts = webdriver.ChromeOptions()
        opts.binary_location = shutil.which("chromium") or "chromium"
        for flag in (
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-background-networking",
            "--force-color-profile=srgb",
            "--force-prefers-reduced-motion",
            f"--window-size={WIDTH},{HEIGHT}",
            f"--user-data-dir={work / 'profile'}",
        ):
            opts.add_argument(flag)
        driver = webdriver.Chrome(
            service=Service(shutil.which("chromedriver") or "chromedriver"), options=opts
        )
        try:
            driver.set_window_size(WIDTH, HEIGHT)
            driver.get((work / "out" / "report.html").as_uri())
            out.write_bytes(driver.get_screenshot_as_png())
        finally:
            driver.quit()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def png_size(path: Path) -> list:
    head = path.read_bytes()[:24]
    return list(struct.unpack(">II", head[16:24]))


def record(report: dict) -> dict:
    from perfsleuth.version import __version__

    return {
        "trace": TRACE,
        "trace_sha256": sha256(ROOT / TRACE),
        "png_sha256": sha256(PNG),
        "png_size": png_size(PNG),
        "window": [WIDTH, HEIGHT],
        "perfsleuth": __version__,
        "command": "python scripts/report_screenshot.py",
        "figures": figures(report),
    }


def problems(saved: dict, report: dict) -> list:
    """Why docs/img/report.png is stale ([] when current)."""
    out = []
    if not PNG.exists():
        return [f"{PNG.relative_to(ROOT)} is missing"]
    if saved.get("png_sha256") != sha256(PNG):
        out.append("the PNG is not the one docs/img/report.json records")
    if saved.get("trace") != TRACE or saved.get("trace_sha256") != sha256(ROOT / TRACE):
        out.append(f"the picture was taken of another trace than {TRACE} as it is now")
    now = figures(report)
    shown = saved.get("figures", {})
    for key, value in now.items():
        if shown.get(key) != value:
            out.append(f"{key}: the picture shows {shown.get(key)!r}, today's analysis {value!r}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/img/report.png is stale")
    args = ap.parse_args(argv)
    report = analyse()
    if args.check:
        saved = json.loads(RECORD.read_text()) if RECORD.exists() else {}
        found = problems(saved, report)
        for line in found:
            print(f"stale: {line}", file=sys.stderr)
        if found:
            print("run: python scripts/report_screenshot.py", file=sys.stderr)
        return 1 if found else 0
    screenshot(report, PNG)
    RECORD.write_text(json.dumps(record(report), indent=2, ensure_ascii=False) + "\n")
    print(
        f"wrote {PNG.relative_to(ROOT)} ({PNG.stat().st_size} bytes) and {RECORD.relative_to(ROOT)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
