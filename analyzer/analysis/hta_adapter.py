"""HolisticTraceAnalysis (HTA) analyses, run on perfsleuth's parsed trace.

HTA (PyPI `traceinsight`, import `hta`) is the field's trace-analysis library. perfsleuth takes three of
its analyses: the GPU kernel breakdown (kernel-type split and top kernels), the idle-time breakdown per
stream (host wait / kernel wait / other) and the kernel launch statistics (CPU launch call vs GPU
duration vs launch delay). See docs/hta.md.

The file is not parsed a second time: `to_hta_trace` builds HTA's `Trace` object directly from
`Trace.events` (vectorised: categorical codes become symbol ids). HTA is optional: without it
`hta_analyses` says so and perfsleuth works as before. HTA's own code raises on some real traces; here
every HTA call is guarded, its exceptions become short warnings in the result, its loggers are held at
ERROR, its Python warnings and stdout are swallowed, and it never shows a plotly figure.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings as _warnings
from typing import Any

import numpy as np
import pandas as pd

from ..trace.model import (
    ANNOTATION,
    CPU_OP,
    DEVICE_KINDS,
    DEVICE_SYNC,
    GPU_ANNOTATION,
    KERNEL,
    KIND_NAMES,
    MEMCPY,
    MEMSET,
    PYTHON,
    RUNTIME,
    Trace,
)

# HTA's category strings for perfsleuth's normalised kinds (what HTA's filters and analyses look for).
HTA_CAT = {
    KERNEL: "kernel", MEMCPY: "gpu_memcpy", MEMSET: "gpu_memset", RUNTIME: "cuda_runtime", CPU_OP: "cpu_op",
    ANNOTATION: "user_annotation", GPU_ANNOTATION: "gpu_user_annotation", PYTHON: "python_function",
    DEVICE_SYNC: "cuda_sync",
}
OTHER_CAT = "other"
TOP_N = 10
# HTA's defaults (TraceAnalysis.get_idle_time_breakdown / get_cuda_kernel_launch_stats), in µs.
CONSECUTIVE_KERNEL_DELAY_US = 30
RUNTIME_CUTOFF_US = 50
LAUNCH_DELAY_CUTOFF_US = 100
_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_HTA_LOGGERS = ("hta",)


def _import_hta():
    """(hta module, version) or raise ImportError with the reason."""
    import hta  # noqa: F401  (sys.modules['hta'] = None raises ImportError here)

    # The modules used below; traceinsight 0.6.1's hta.utils imports psutil without declaring it.
    import hta.analyzers.breakdown_analysis  # noqa: F401  (imports plotly)
    import hta.analyzers.cuda_kernel_analysis  # noqa: F401
    import hta.common.trace  # noqa: F401

    try:
        from hta.version import __version__ as version
    except ImportError:
        version = getattr(hta, "__version__", None)
    return hta, version


@contextlib.contextmanager
def _quiet():
    """HTA routine chatter off: its loggers at ERROR, Python warnings ignored, stdout swallowed."""
    saved = []
    for name in _HTA_LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, lg.level))
        lg.setLevel(logging.ERROR)
    try:
        with _warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            _warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in saved:
            lg.setLevel(level)


def _window(ev: pd.DataFrame, steps) -> pd.DataFrame:
    """Events that start inside the steady steps (as the report's top tables count them; warm-up steps lead and
    a partial one ends the trace, so the steady steps are one stretch); all without steps."""
    if steps is None or getattr(steps, "frame", None) is None or steps.frame.empty:
        return ev
    fr = steps.frame[steps.steady_mask()] if hasattr(steps, "steady_mask") else steps.frame
    fr = fr if len(fr) else steps.frame
    lo, hi = int(fr["start"].min()), int(fr["end"].max())
    ts = ev["ts"].to_numpy()
    return ev[(ts >= lo) & (ts < hi)]


def _symbols(ev: pd.DataFrame) -> tuple[list, np.ndarray, np.ndarray]:
    """Symbol list (categories first, then event names) and the per-row cat / name symbol ids."""
    cat_names = [HTA_CAT.get(k, OTHER_CAT) for k in range(len(KIND_NAMES))]
    symbols: list[str] = []
    index: dict[str, int] = {}
    for s in cat_names:
        if s not in index:
            index[s] = len(symbols)
            symbols.append(s)
    kind_to_id = np.array([index[s] for s in cat_names], dtype=np.int64)
    kinds = ev["kind"].to_numpy().astype(np.int64)
    cat_ids = kind_to_id[np.clip(kinds, 0, len(kind_to_id) - 1)]

    names = ev["name"]
    if not isinstance(names.dtype, pd.CategoricalDtype):
        names = names.astype(str).astype("category")
    cats = [str(c) for c in names.cat.categories]
    lookup = np.empty(len(cats) + 1, dtype=np.int64)  # last slot: missing name (code -1) -> ""
    for i, s in enumerate(cats + [""]):  # once per distinct name, not per event
        if s not in index:
            index[s] = len(symbols)
            symbols.append(s)
        lookup[i] = index[s]
    codes = names.cat.codes.to_numpy().astype(np.int64)
    name_ids = lookup[np.where(codes >= 0, codes, len(cats))]
    return symbols, cat_ids, name_ids


def _index_correlation(corr: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """HTA's `index_correlation` (transform_correlation_to_index), by row position + 1 (= `index`).

    -1: no correlation; 0: correlated but the partner is not in the frame; >0: the partner's index.
    """
    ic = np.minimum(corr, 0).astype(np.int64)
    on_gpu = (stream >= 0) & (corr >= 0)
    on_cpu = (corr != -1) & ~on_gpu
    pos = np.arange(len(corr), dtype=np.int64)
    cpu = pd.DataFrame({"correlation": corr[on_cpu], "i": pos[on_cpu]})
    gpu = pd.DataFrame({"correlation": corr[on_gpu], "i": pos[on_gpu]})
    m = cpu.merge(gpu, on="correlation", how="inner")
    if len(m):
        ci, gi = m["i_x"].to_numpy(), m["i_y"].to_numpy()
        ic[ci] = gi + 1
        ic[gi] = ci + 1
    return ic


def _iterations(ts: np.ndarray, end: np.ndarray, stream: np.ndarray, name_ids: np.ndarray, symbols: list,
                ic: np.ndarray) -> np.ndarray:
    """HTA's `iteration` (add_iteration): a host event gets N of the ProfilerStep#N window it starts in,
    a device event the iteration of its launch call; -1 otherwise."""
    it = np.full(len(ts), -1, dtype=np.int64)
    step_no = np.full(len(symbols), -1, dtype=np.int64)
    for i, s in enumerate(symbols):  # once per distinct symbol, not per event
        m = _STEP.match(s)
        if m:
            step_no[i] = int(m.group(1))
    host = stream < 0
    sn = step_no[name_ids]
    st = np.flatnonzero((sn >= 0) & host)
    if len(st):
        order = st[np.argsort(ts[st], kind="stable")]
        s_ts, s_end, s_no = ts[order], end[order], sn[order]
        j = np.searchsorted(s_ts, ts, side="right") - 1
        jj = np.clip(j, 0, None)
        ok = host & (j >= 0) & (ts < s_end[jj])
        it[ok] = s_no[jj[ok]]
    dev = ~host & (ic > 0)
    it[dev] = it[ic[dev] - 1]
    return it


def _hta_frame(trace: Trace, steps=None) -> tuple[pd.DataFrame, list]:
    """The events as HTA's parser would leave them (after load_traces): µs int times, symbol ids, `stream`,
    `index` (also the frame's index), `correlation`, `index_correlation`, `iteration`, ..."""
    ev = _window(trace.events, steps)
    n = len(ev)
    symbols, cat_ids, name_ids = _symbols(ev)
    kinds = ev["kind"].to_numpy()
    is_dev = np.isin(kinds, DEVICE_KINDS)
    tid = ev["tid"].to_numpy().astype(np.int64)
    # HTA's `stream` is the GPU stream of device work (Kineto puts it in tid and args.stream); -1 for the host.
    stream = np.where(is_dev & (tid >= 0), tid, -1).astype(np.int64)
    # µs integers as HTA keeps them; start and end are rounded separately so durations do not drift.
    ts = np.rint(ev["ts"].to_numpy() / 1000.0).astype(np.int64)
    end = np.rint(ev["end"].to_numpy() / 1000.0).astype(np.int64)
    corr = ev["corr"].to_numpy().astype(np.int64)
    ic = _index_correlation(corr, stream)
    index = np.arange(1, n + 1, dtype=np.int64)  # 0 means "partner not in trace" in index_correlation
    df = pd.DataFrame(
        {
            "index": index,
            "ts": ts,
            "dur": end - ts,
            "end": end,
            "cat": cat_ids,
            "name": name_ids,
            "pid": ev["pid"].to_numpy().astype(np.int64),
            "tid": tid,
            "stream": stream,
            "correlation": corr,
            "external_id": ev["ext"].to_numpy().astype(np.int64),
            "index_correlation": ic,
            "iteration": _iterations(ts, end, stream, name_ids, symbols, ic),
        },
        index=pd.Index(index),
    )
    return df, symbols


def _meta(trace: Trace) -> dict:
    meta: dict[str, Any] = {
        "device_type": {"cuda": "NVIDIA GPU", "rocm": "AMD GPU"}.get(trace.device_type, "UNKNOWN GPU"),
        "deviceProperties": [{"id": i, "name": d.name, "computeMajor": d.compute_major,
                              "computeMinor": d.compute_minor, "totalGlobalMem": d.memory_bytes,
                              "numSms": d.num_sms} for i, d in enumerate(trace.devices)],
    }
    if trace.rank is not None or trace.world_size is not None or trace.backend is not None:
        meta["distributedInfo"] = {"backend": trace.backend, "rank": trace.rank, "world_size": trace.world_size}
    return meta


def to_hta_trace(trace: Trace, steps=None):
    """An `hta.common.trace.Trace` holding this trace's events, built without HTA reading the file.

    `steps` (perfsleuth `Steps`) limits the events to the profiled steps, as the report's tables are.
    The rank key is the trace's rank (0 when the trace has none). Raises ImportError without HTA.
    perfsleuth's `trace.events` is only read.
    """
    _import_hta()
    from hta.common.trace import Trace as HtaTrace
    from hta.common.trace_symbol_table import TraceSymbolTable
    from hta.configs.parser_config import ParserConfig

    rank = trace.rank if trace.rank is not None else 0
    df, symbols = _hta_frame(trace, steps)
    table = TraceSymbolTable()
    table.add_symbols(symbols)
    t = HtaTrace.__new__(HtaTrace)  # HtaTrace.__init__ would look for and validate files on disk
    path = os.path.abspath(trace.path)
    t.is_parsed = True
    t.trace_path = os.path.dirname(path)
    t.trace_files = {rank: path}
    t.parser_config = ParserConfig.get_default_cfg()
    t.traces = {rank: df}
    t.symbol_table = table
    t.meta_data = {rank: _meta(trace)}
    t.min_ts = int(round(trace.t0_us))
    return t


# --- the analyses ---------------------------------------------------------------------------------------
def _r(x, nd: int = 3):
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return round(f, nd) if np.isfinite(f) else None


def _short(msg: str, limit: int = 160) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= limit else msg[: limit - 1] + "…"


def _kernel_breakdown(t, rank: int) -> dict:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    # No folding into "others" inside HTA (its folded rows get min/max/mean of per-kernel sums): every kernel
    # keeps its own statistics; the top ones are picked here.
    type_df, kernel_df = BreakdownAnalysis.get_gpu_kernel_breakdown(
        t, visualize=False, duration_ratio=1.0, num_kernels=2**62, include_memory_kernels=True)
    kernel_df = kernel_df[kernel_df["rank"] == rank]
    totals = kernel_df.groupby("kernel_type")["sum (us)"].sum()
    grand = float(totals.sum()) or 1.0
    top = kernel_df.sort_values(["sum (us)", "name"], ascending=[False, True]).head(TOP_N)
    return {
        # HTA's split of device time by kernel type (intervals merged per type); time where types overlap
        # gets its own row ("COMPUTATION overlapping COMMUNICATION").
        "kernel_type_breakdown": [
            {"kernel_type": str(r["kernel_type"]), "time_us": _r(r["sum"]), "percentage": _r(r["percentage"], 1)}
            for r in type_df.to_dict("records") if float(r["sum"]) > 0
        ],
        # Sum of kernel durations per type (no overlap removal): comparable with perfsleuth's kernel totals.
        "kernel_type_totals_us": {str(k): _r(v) for k, v in totals.items()},
        "top_kernels": [
            {"name": _short(r["name"], 200), "kernel_type": str(r["kernel_type"]), "total_us": _r(r["sum (us)"]),
             "share": _r(float(r["sum (us)"]) / grand, 4), "mean_us": _r(r["mean (us)"]),
             "max_us": _r(r["max (us)"]), "min_us": _r(r["min (us)"])}
            for r in top.to_dict("records")
        ],
    }


def _idle_time(t, rank: int) -> list:
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    df, _ = BreakdownAnalysis.get_idle_time_breakdown(
        t, CONSECUTIVE_KERNEL_DELAY_US, rank=rank, visualize=False, show_idle_interval_stats=False)
    wide = df.pivot_table(index="stream", columns="idle_category", values="idle_time", aggfunc="sum",
                          fill_value=0)
    rows = []
    for stream, r in wide.iterrows():  # one row per stream
        host, kern, other = (float(r.get(c, 0.0)) for c in ("host_wait", "kernel_wait", "other"))
        total = host + kern + other
        rows.append({"stream": int(stream), "idle_us": _r(total), "host_wait_us": _r(host),
                     "kernel_wait_us": _r(kern), "other_us": _r(other)})
    rows.sort(key=lambda d: (-(d["idle_us"] or 0.0), d["stream"]))
    return rows[:TOP_N]


def _launch_stats(t, rank: int, device_type: str) -> dict:
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis

    res = CudaKernelAnalysis.cuda_kernel_launch_stats(
        t, ranks=[rank], runtime_cutoff=RUNTIME_CUTOFF_US, launch_delay_cutoff=LAUNCH_DELAY_CUTOFF_US,
        include_memory_events=True, visualize=False)
    df = res.get(rank)
    n = 0 if df is None else len(df)
    out: dict[str, Any] = {"launches": n, "cutoffs_us": {"runtime": RUNTIME_CUTOFF_US,
                                                         "launch_delay": LAUNCH_DELAY_CUTOFF_US}}
    if n == 0:
        out["note"] = ("HTA's launch statistics follow cudaLaunchKernel, cudaLaunchKernelExC, cudaMemcpyAsync and "
                       "cudaMemsetAsync calls only; none here matched a device event"
                       + (" (HIP launch calls are not followed)" if device_type == "rocm" else ""))
        return out
    cpu, gpu, delay = (df[c].to_numpy(np.float64) for c in ("cpu_duration", "gpu_duration", "launch_delay"))

    def stats(a):
        return {"median": _r(np.median(a)), "p90": _r(np.percentile(a, 90)), "max": _r(a.max())}

    out.update({
        "cpu_duration_us": stats(cpu),
        "gpu_duration_us": stats(gpu),
        "launch_delay_us": stats(delay),
        # HTA's three findings: kernels shorter than their launch call, slow launch calls, late starts.
        "short_kernels": int(((cpu <= RUNTIME_CUTOFF_US) & (gpu < cpu)).sum()),
        "runtime_outliers": int((cpu > RUNTIME_CUTOFF_US).sum()),
        "launch_delay_outliers": int((delay > LAUNCH_DELAY_CUTOFF_US).sum()),
    })
    return out


def hta_analyses(trace: Trace, steps=None) -> dict:
    """HTA's kernel breakdown, idle-time breakdown and launch statistics for `trace`, JSON-safe and small.

    Never raises for a trace: an HTA failure becomes a line in `warnings`. Returns
    `{"hta": {"available": False, "reason": ...}}` when HTA cannot be imported, and
    `{"hta": {..., "applicable": False, "reason": ...}}` for a trace without device work.
    """
    try:
        with _quiet():
            _, version = _import_hta()
    except Exception as exc:  # noqa: BLE001 -- ImportError, or a broken install failing at import time
        return {"hta": {"available": False, "reason": _short(
            f"HolisticTraceAnalysis (pip install traceinsight) cannot be imported: {type(exc).__name__}: {exc}")}}
    out: dict[str, Any] = {"available": True, "version": version}
    ev = trace.events
    if trace.device_type == "cpu" or not bool(ev["kind"].isin(DEVICE_KINDS).any()):
        out.update(applicable=False, reason="CPU-only trace: no device work for HTA's GPU analyses")
        return {"hta": out}
    rank = trace.rank if trace.rank is not None else 0
    warn: list[str] = []
    in_steps = steps is not None and len(steps) > 0 and getattr(steps, "source", None) != "whole-trace"
    out.update(applicable=True, scope="steps" if in_steps else "trace", rank=rank)
    with _quiet():
        try:
            t = to_hta_trace(trace, steps)
        except Exception as exc:  # noqa: BLE001 -- HTA's failure is reported, never perfsleuth's crash
            warn.append(_short(f"building HTA's trace failed: {type(exc).__name__}: {exc}"))
            out["warnings"] = warn
            return {"hta": out}
        if not (t.traces[rank]["stream"] >= 0).any():
            out.update(applicable=False, reason="no device work inside the profiled steps")
            return {"hta": out}
        for key, fn in (("kernel_breakdown", lambda: _kernel_breakdown(t, rank)),
                        ("idle_time", lambda: _idle_time(t, rank)),
                        ("launch_stats", lambda: _launch_stats(t, rank, trace.device_type))):
            try:
                res = fn()
            except Exception as exc:  # noqa: BLE001
                warn.append(_short(f"HTA {key} failed: {type(exc).__name__}: {exc}"))
                continue
            if key == "kernel_breakdown":
                out.update(res)
            else:
                out[key] = res
    out["warnings"] = warn
    return {"hta": out}
