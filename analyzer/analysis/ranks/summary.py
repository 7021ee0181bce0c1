"""One rank's summary for the cross-rank analysis (analysis/ranks/collectives.py): small enough to send between
processes or back from a Dask worker, never the event table.

It holds the per-step category times of the steps the rank's own analysis uses (its Breakdown), and
one row per collective instance that starts inside one of those steps:

- on a device trace, the collective kernels (`ncclKernel_*`, `ncclDevKernel_*`, RCCL), which finish
  together on every rank of the collective;
- on a CPU-only trace, the backend's own spans on its worker threads (`gloo:all_reduce`, ...), which
  cover the waiting for the peers and the transfer.

Each row carries the process group and the sequence number where the trace records them (the event's
own args, or those of the `record_param_comms` op it was launched from, joined by External id), the
global rank of the peer of a send or recv where the trace names it, and times on the rank's own clock
in ns since the epoch of that clock (the trace's origin added back).

Beside them, what says which job a trace belongs to (analysis/ranks/jobs.py): world size, backend, process
groups, device model and the trace's time window on its own clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import pandas as pd

from ...config import CATEGORIES
from ...trace.model import ANNOTATION, CPU_OP, KERNEL, Trace
from ...trace.names import collective_kind, is_comm, is_memory_kernel, name_mask
from ...trace.selection import of_kind
from ..attribution import Breakdown

COLLECTIVE_COLUMNS = ("step", "name", "pg", "seq", "peer", "start", "end")
P2P_KINDS = frozenset({"send", "recv", "sendrecv"})  # point-to-point: one peer, paired by analysis/ranks/p2p.py


@dataclass
class RankSummary:
    """What the cross-rank analysis needs from one rank (see the module docstring)."""

    path: str
    rank: Optional[int]
    world_size: Optional[int]
    device_type: str
    verdict: str
    steps: list  # step names, in order
    step_ns: np.ndarray  # duration of each step
    category_ns: dict  # category -> mean ns per step
    collectives: pd.DataFrame  # COLLECTIVE_COLUMNS; step = index into `steps`
    process_groups: dict = field(default_factory=dict)  # pg name -> global ranks (distributedInfo)
    collective_source: str = "none"  # device kernels | host spans | none
    backend: Optional[str] = None  # distributedInfo.backend
    device_name: Optional[str] = None  # the device model(s), None on a CPU-only trace
    window_ns: tuple = (0, 0)  # the trace's first and last event time on its own clock (origin added)

    @property
    def median_step_ns(self) -> float:
        return float(np.median(self.step_ns)) if len(self.step_ns) else 0.0


def summarize_rank(trace: Trace, breakdown: Breakdown, verdict: str) -> RankSummary:
    steps = breakdown.steps
    n = max(1, len(steps))
    category_ns = {c: float(steps[c].sum()) / n for c in CATEGORIES}
    colls, source = _collectives(trace, steps)
    rank, world = trace.rank, trace.world_size
    if rank is None:  # no distributedInfo (no process group): the rank `perfsleuth run` saw in RANK
        host = trace.run_metadata.get("host") if isinstance(trace.run_metadata, dict) else None
        host = host if isinstance(host, dict) else {}
        rank, world = _int(host.get("rank")), _int(host.get("world_size"))
    origin = int(round(trace.t0_us * 1000.0))
    ev = trace.events
    window = (origin + int(ev["ts"].min()), origin + int(ev["end"].max())) if len(ev) else (origin, origin)
    return RankSummary(path=trace.path, rank=rank, world_size=world,
                       device_type=trace.device_type, verdict=verdict, steps=[str(s) for s in steps["name"]],
                       step_ns=steps["duration"].to_numpy(np.int64).copy(), category_ns=category_ns,
                       collectives=colls, process_groups=dict(trace.process_groups), collective_source=source,
                       backend=trace.backend, device_name=trace.device_name, window_ns=window)


def _collectives(trace: Trace, steps: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    ev = trace.events
    kern = of_kind(ev, KERNEL)
    comm = kern[name_mask(kern["name"], lambda n: is_comm(n) and not is_memory_kernel(n))]
    source = "device kernels"
    if comm.empty:
        ann = of_kind(ev, ANNOTATION)
        comm, source = ann[name_mask(ann["name"], _is_backend_span)], "host spans"
    if comm.empty:
        return _empty(), "none"
    pg, seq, peer = _groups(ev, comm)
    start, end = comm["ts"].to_numpy(np.int64), comm["end"].to_numpy(np.int64)
    st, en = steps["start"].to_numpy(np.int64), steps["end"].to_numpy(np.int64)
    idx = np.searchsorted(st, start, side="right") - 1
    inside = (idx >= 0) & (start < en[np.clip(idx, 0, None)])
    names = comm["name"].cat.remove_unused_categories().cat.categories
    kinds = {c: collective_kind(c) or c.split("(")[0][:80] for c in names}
    origin = int(round(trace.t0_us * 1000.0))
    out = pd.DataFrame({
        "step": idx[inside].astype(np.int32),
        "name": comm["name"].astype(str).map(kinds).to_numpy()[inside],
        "pg": pg[inside], "seq": seq[inside], "peer": _global_peer(pg[inside], peer[inside], trace.process_groups),
        "start": start[inside] + origin, "end": end[inside] + origin,
    })
    return out.sort_values(["start", "end"], kind="stable").reset_index(drop=True), source


def _int(v) -> Optional[int]:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _is_backend_span(name: str) -> bool:
    """`gloo:all_reduce`, `nccl:broadcast`, ...: a collective's own span on the host."""
    return collective_kind(name) is not None and ":" in name and is_comm(name)


def _global_peer(pg: np.ndarray, peer: np.ndarray, groups: dict) -> np.ndarray:
    """The peer's global rank: its rank in the group mapped through the group's ranks where
    distributedInfo.pg_config lists them, else taken as global (the default group)."""
    out = peer.astype(np.int64).copy()
    for i in np.flatnonzero(out >= 0):
        ranks = groups.get(str(pg[i]))
        if ranks:
            out[i] = ranks[out[i]] if out[i] < len(ranks) else -1
    return out


def _groups(ev: pd.DataFrame, comm: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Process group, sequence number and peer of each collective: its own args, else those of the
    record_param_comms op with the same External id."""
    pg = comm["pg"].astype(str).to_numpy(dtype=object)
    seq = comm["seq"].to_numpy(np.int64).copy()
    peer = comm["peer"].to_numpy(np.int64).copy()
    missing = pg == ""
    if missing.any():
        ops = of_kind(ev, CPU_OP)
        ops = ops[name_mask(ops["pg"], lambda g: g != "") & (ops["ext"].to_numpy() >= 0)].drop_duplicates("ext")
        if len(ops):
            by_ext = pd.DataFrame({"pg": ops["pg"].astype(str).to_numpy(), "seq": ops["seq"].to_numpy(),
                                   "peer": ops["peer"].to_numpy()}, index=ops["ext"].to_numpy())
            ext = comm["ext"].to_numpy()[missing]
            found = by_ext.reindex(ext)
            ok = found["pg"].notna().to_numpy()
            rows = np.flatnonzero(missing)[ok]
            pg[rows] = found["pg"].to_numpy()[ok]
            seq[rows] = np.where(seq[rows] >= 0, seq[rows], found["seq"].to_numpy()[ok].astype(np.int64))
            peer[rows] = np.where(peer[rows] >= 0, peer[rows], found["peer"].to_numpy()[ok].astype(np.int64))
    return pg, seq, peer


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"step": np.empty(0, np.int32), "name": np.empty(0, object), "pg": np.empty(0, object),
                         "seq": np.empty(0, np.int64), "peer": np.empty(0, np.int64), "start": np.empty(0, np.int64),
                         "end": np.empty(0, np.int64)})
