"""Build large traces by replicating the steps of a real trace.

    python benchmarks/make_large.py fixtures/traces/real/v100_df_index_resolver.json.gz OUTDIR --times 2 5 10 20

Each copy of the events is shifted by the trace's span (so copies follow each other in time), and its
correlation ids, External ids, flow ids and ProfilerStep numbers are renumbered so that the copies do
not collide. Output is uncompressed JSON (`NAME.xK.json`), plus `.json.gz` with `--gzip`.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import re
from pathlib import Path

import msgspec

STEP = re.compile(r"^ProfilerStep#(\d+)$")


def load(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return msgspec.json.decode(raw)


def shifted(events: list, k: int, span: float, id_stride: int, n_steps: int) -> list:
    out = []
    for e in events:
        if e.get("ph") == "M":
            continue
        e = copy.copy(e)
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] = round(e["ts"] + k * span, 3)
        if "id" in e and isinstance(e["id"], int):
            e["id"] += k * id_stride
        args = e.get("args")
        if isinstance(args, dict):
            args = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] += k * id_stride
            e["args"] = args
        m = STEP.match(e.get("name") or "")
        if m:
            e["name"] = f"ProfilerStep#{int(m.group(1)) + k * n_steps}"
        out.append(e)
    return out


def replicate(doc: dict, times: int) -> dict:
    events = doc["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))
          and isinstance(e.get("pid"), int)]
    start = min(e["ts"] for e in xs)
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - start + 1000.0
    ids = [v for e in events for v in ((e.get("args") or {}).get("correlation"), (e.get("args") or {}).get("External id"), e.get("id")) if isinstance(v, int)]
    id_stride = max(ids) + 1 if ids else 0
    n_steps = len({e["name"] for e in xs if STEP.match(e.get("name", ""))})
    meta = [e for e in events if e.get("ph") == "M"]
    body = [ev for k in range(times) for ev in shifted(events, k, span, id_stride, n_steps)]
    out = dict(doc)
    out["traceEvents"] = meta + body
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--times", type=int, nargs="+", default=[2, 5, 10, 20])
    ap.add_argument("--gzip", action="store_true", help="also write .json.gz copies")
    args = ap.parse_args()
    args.outdir.mkdir(parents=True, exist_ok=True)
    doc = load(args.trace)
    stem = args.trace.name.split(".")[0]
    for t in args.times:
        path = args.outdir / f"{stem}.x{t}.json"
        data = msgspec.json.encode(replicate(doc, t))
        path.write_bytes(data)
        print(f"{path}\t{len(data) / 1e6:.1f} MB")
        if args.gzip:
            gz = path.with_suffix(".json.gz")
            gz.write_bytes(gzip.compress(data, compresslevel=1))
            print(f"{gz}\t{gz.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
