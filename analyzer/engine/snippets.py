"""A finding's fix snippet set to the setting a forecast advises or `--verify` measured fastest
(issue 40): the rule renders its snippet with the free cores' worker count (facts:
`dataloader_workers_suggested`); the forecast may advise another count
(analysis/forecast/models/loader.advised_workers), and `run --verify` measures several. Plain text edits of
`key=N` in the rendered snippet; the snippet says which number it shows."""

from __future__ import annotations

import re

from ..report.figures import curve_text

MEASURED = "measured fastest here by `perfsleuth run --verify`"


def best_setting_snippet(fix: str, verified: dict) -> str:
    """The fix's snippet with the setting measured fastest (issue 40): each `key=N` of the best
    experiment's integer parameters (`num_workers=2`) set to its value, the line's comment saying
    so, and a line that names it with the settings tried. Unchanged when the snippet names none."""
    curve = curve_text(verified)
    said = f" (settings: {curve})" if curve else ""
    line = (f"`{verified.get('variant')}` is the setting measured fastest on this machine by "
            f"`perfsleuth run --verify`{said}.")
    return with_setting(fix, verified.get("params") or {}, MEASURED, line)


def forecast_setting_snippet(fix: str, forecast: dict) -> str:
    """The fix's snippet with the worker count its forecast advises (analysis/forecast/models/loader.
    advised_workers: the best forecast of the counts compared, which may not be the free cores'
    count the snippet was written with), or a line saying that no count forecasts a gain."""
    said = str(((forecast or {}).get("assumptions") or {}).get("workers") or "")
    m = re.match(r"num_workers=(\d+) \(was \d+\): (.*)", said)
    if not m or not isinstance(fix, str):
        return fix
    count = {"num_workers": int(m.group(1))}
    if "no count helps" in m.group(2):
        curve = m.group(2).split("(", 1)[1].split(")", 1)[0]
        line = (f"No worker count forecasts a gain on this machine ({curve}): measure before "
                "applying it (`perfsleuth run --verify` tries them).")
        changed = with_setting(fix, count, "the least slow forecast", line)
        return changed if changed != fix else fix + f"\n\n{line}"
    if not re.search(r"\bnum_workers=\d+", fix) or re.search(rf"\bnum_workers={m.group(1)}\b", fix):
        return fix
    return with_setting(fix, count, "the count with the best forecast",
                        f"`num_workers={m.group(1)}`: {m.group(2)}.")


def with_setting(fix: str, params: dict, comment: str, line: str) -> str:
    """`fix` with each `key=N` of `params`' integers set to its value, the comment of each line
    that sets one replaced by `comment`, and `line` added; unchanged when no line sets one."""
    ints = {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
    changed = False
    out = []
    for text in fix.split("\n"):
        new = text
        for key, value in ints.items():
            new = re.sub(rf"\b{re.escape(str(key))}=\d+", f"{key}={value}", new)
        if any(re.search(rf"\b{re.escape(str(k))}={v}\b", new) for k, v in ints.items()):
            new = re.sub(r"#[^\n]*$", f"# {comment}", new)
            changed = True
        out.append(new)
    return "\n".join(out) + f"\n\n{line}" if changed else fix
