"""Hand-built report@1 dicts (docs/schema.md) for the renderer and output tests.

`make_report()` gives a realistic, deterministic report; the arguments scale it (steps, findings,
kernels, ops), make it CPU-only, or fill every name a trace controls with hostile text.
"""

from __future__ import annotations

import copy

from perfsleuth.report.numbers import capped, severity_for

CATEGORIES = ("dataloader", "kernel", "sync", "transfer", "host", "communication", "other")

HOSTILE = {
    "script": "<script>alert(1)</script>",
    "backticks": "aten::`mm` ``x`` ```y",
    "pipes": "void gemm<float|half>| col | col |",
    "comment": "op --> end %% #quot; ;",
    "newline": "line one\nline two\r\n| x | y |",
    "link": "[click](javascript:alert(1)) ![img](https://evil.example/x.png)",
    "path": "/tmp/`evil`|dir/<img src=x onerror=alert(1)>.py",
    "quote": "say \"hi\" it's ``` fence",
}

_FIX = (
    "Load batches in worker processes so the GPU is not waiting on Python.\n\n"
    "Before:\n```python\nloader = DataLoader(ds, batch_size=64)\n```\n"
    "After:\n```python\nloader = DataLoader(ds, batch_size=64, num_workers=8, pin_memory=True)\n```\n"
    "Start with `num_workers` equal to the CPU cores per GPU."
)

_RULES = [
    ("num-workers", "DataLoader runs in the main process", "dataloader", "high"),
    ("item-sync", "aten::item forces a device sync every step", "sync", "medium"),
    ("pageable-h2d", "Host-to-device copies from pageable memory", "transfer", "medium"),
    ("fp32-gemm", "Matrix multiplies run in FP32 without TF32", "kernel", "low"),
    ("small-kernels", "Many tiny kernels: launch overhead dominates", "host", "low"),
]


def make_step(i: int, *, device: bool = True, base_us: float = 2000.0) -> dict:
    """One step whose categories sum exactly to its duration; varies a little with `i`."""
    wobble = (i * 37) % 11 * 10.0
    t = {
        "dataloader": 300.0 + wobble,
        "kernel": (1200.0 + 5 * wobble) if device else 0.0,
        "sync": 60.0 if device else 0.0,
        "transfer": 90.0 if device else 0.0,
        "host": 250.0 + (0.0 if device else 1300.0),
        "communication": 40.0 if device else 0.0,
        "other": 10.0,
    }
    scale = base_us / 2000.0
    t = {k: round(v * scale, 3) for k, v in t.items()}
    return {
        "name": f"ProfilerStep#{i + 3}",
        "start_us": round(i * base_us * 1.1, 3),
        "duration_us": round(sum(t.values()), 3),
        "time_us": t,
    }


def make_finding(i: int) -> dict:
    """A finding as the engine makes it: severity from its forecast (report/numbers.py), or the rule's
    own, at most medium, where there is none; the rule's ceiling in the JSON only."""
    rule, title, category, severity = _RULES[i % len(_RULES)]
    suffix = "" if i < len(_RULES) else f" ({i // len(_RULES) + 1})"
    forecast = _forecast(i)
    return {
        "rule": rule if i < len(_RULES) else f"{rule}-{i}",
        "title": title + suffix,
        "category": category,
        "severity": severity_for(forecast["speedup"]) if forecast["speedup"] is not None else capped(severity),
        "severity_from": "forecast" if forecast["speedup"] is not None else "rule",
        "ceiling": {"saving_us": round(600.0 / (i + 1), 3), "speedup": round(1.0 + 0.3 / (i + 1), 3),
                    "basis": "the time the device waits for the next batch"},
        "message": "The DataLoader takes 17.0% of the step in the main process.\nRecord with `with_stack=True` to see the source lines.",
        "evidence": {"dataloader_share": 0.17, "calls_per_step": 12, "pageable_bytes_per_step": 25165824,
                     "wait_us_per_step": 345.5, "exposed_fraction": 0.5},
        "thresholds": {"min_share": 0.05, "high_share": 0.2},
        "docs": f"perfsleuth rules {rule}",
        "fix": _FIX,
        "locations": [{"file": "train.py", "line": 57 + i, "function": "train_step"}],
        "forecast": forecast,
    }


def _forecast(i: int) -> dict:
    """A forecast like the engine's (engine/forecast.py); every fifth finding has none."""
    if i % len(_RULES) == len(_RULES) - 1:
        return {"speedup": None, "saving_us": None, "low": None, "high": None, "model": None, "assumptions": {},
                "reason": "no forecast model for this fix", "kind": "none"}
    x = round(1.0 + 0.25 / (i + 1), 3)
    return {"speedup": x, "saving_us": round(2250.0 * (1 - 1 / x), 3), "low": round(1 + 0.2 / (i + 1), 3),
            "high": round(1 + 0.3 / (i + 1), 3), "model": "dataloader-workers", "step_us": round(2250.0 / x, 3),
            "assumptions": {"workers": "num_workers=8 (was 0)", "cores": "8 (recorded by perfsleuth run)",
                            "replay": "4 steady step(s) replayed; the unchanged replay lands +0.4% from the recording"},
            "reason": None, "kind": "forecast"}


def make_kernel(i: int, total_us: float) -> dict:
    count = 10 + i
    return {
        "name": f"ampere_sgemm_128x64_nn_{i}",
        "count": count,
        "total_us": round(total_us, 3),
        "mean_us": round(total_us / count, 3),
        "share": round(0.3 / (i + 1), 4),
        "type": "compute" if i % 3 else "memory",
    }


def make_report(
    steps: int = 6,
    findings: int = 3,
    kernels: int = 8,
    ops: int = 8,
    *,
    device: bool = True,
    warnings: list[str] | None = None,
) -> dict:
    """A report@1 dict with `steps` steps, `findings` findings, `kernels` top kernels, `ops` top ops."""
    step_list = [make_step(i, device=device) for i in range(steps)]
    totals = {c: sum(s["time_us"][c] for s in step_list) for c in CATEGORIES}
    grand = sum(s["duration_us"] for s in step_list) or 1.0
    durations = sorted(s["duration_us"] for s in step_list) or [0.0]
    return {
        "schema": "perfsleuth/report@1",
        "tool": {"name": "perfsleuth", "version": "0.1.0"},
        "trace": {
            "path": "runs/rank0.pt.trace.json.gz",
            "device": "NVIDIA A100-SXM4-80GB" if device else None,
            "device_type": "cuda" if device else "cpu",
            "compute_capability": 8.0 if device else None,
            "rank": 0 if device else None,
            "world_size": 16 if device else None,
            "events": 67209,
            "has_stacks": False,
            "has_shapes": True,
        },
        "steps_source": "ProfilerStep",
        "steps": step_list,
        "summary": {
            "step_time_us": {
                "median": durations[len(durations) // 2],
                "mean": round(grand / max(steps, 1), 3),
                "p90": durations[int(0.9 * (len(durations) - 1))],
            },
            "time_share": {c: round(totals[c] / grand, 4) for c in CATEGORIES},
            "device_busy": 0.71 if device else None,
        },
        "verdict": "kernel-bound" if device else "host-bound",
        "verdict_reason": "kernels take 61% of the step and no stall category takes a material share",
        "findings": [make_finding(i) for i in range(findings)],
        "top_kernels": [make_kernel(i, 5000.0 / (i + 1)) for i in range(kernels)],
        "top_ops": [
            {"name": f"aten::op_{i}", "count": 20 + i, "total_us": 900.0 - i, "mean_us": round((900.0 - i) / (20 + i), 3)}
            for i in range(ops)
        ],
        "warnings": list(warnings) if warnings is not None else ["2 steps were dropped: incomplete at the trace edge"],
    }


def make_hostile_report() -> dict:
    """A report where every trace-controlled name is hostile text (see HOSTILE)."""
    r = make_report(steps=4, findings=3, kernels=len(HOSTILE), ops=len(HOSTILE))
    names = list(HOSTILE.values())
    for k, name in zip(r["top_kernels"], names):
        k["name"] = name
    for o, name in zip(r["top_ops"], reversed(names)):
        o["name"] = name
    r["trace"]["path"] = HOSTILE["path"]
    r["trace"]["device"] = HOSTILE["script"]
    r["verdict_reason"] = HOSTILE["link"] + " " + HOSTILE["script"]
    r["steps"][0]["name"] = HOSTILE["script"]
    f = r["findings"][0]
    f["title"] = "Slow op " + HOSTILE["script"] + " " + HOSTILE["pipes"]
    f["rule"] = HOSTILE["comment"]
    f["fix"] = "Replace " + HOSTILE["backticks"] + "\n```\n" + HOSTILE["script"] + "\n```\n" + HOSTILE["link"]
    f["evidence"] = {"op": HOSTILE["script"], "note": HOSTILE["newline"]}
    f["locations"] = [{"file": HOSTILE["path"], "line": 3, "function": HOSTILE["script"]}]
    r["warnings"] = [HOSTILE["script"], HOSTILE["newline"]]
    return r


def clone(report: dict) -> dict:
    return copy.deepcopy(report)
