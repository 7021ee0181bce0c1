"""What a DataLoader worker process costs per batch, beside the Dataset's own work: the constants of
the worker model (perfsleuth/analysis/forecast/models/loader.py).

For each per-sample Python workload (PythonHeavyDataset tokens) and number of tensors per batch, a
loop only takes batches -- in-process (num_workers=0), then from one worker -- interleaved, `--repeats`
times. Every sample times its own __getitem__ in CPU time, so the worker's CPU splits into the
Dataset's work and the rest. Printed per case (medians over the repeats, ms per batch):

    getitem   the Dataset's CPU in-process and in the worker (their ratio: the worker's slowdown)
    worker    worker CPU outside __getitem__ minus in-process CPU outside it (collate): the handoff
    main      main-process CPU per batch taken from the worker
    wait      wall per batch minus the worker's CPU: its time on the queues

    python benchmarks/handoff.py [--repeats 5] [--batches 150]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fixtures" / "scripts" / "cpu"))

import torch  # noqa: E402
import toy  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timed(Dataset):
    """PythonHeavyDataset samples with `fields` tensors, and the CPU its __getitem__ took."""

    def __init__(self, n: int, work: int, fields: int):
        self.data, self.fields = toy.PythonHeavyDataset(n, 64, work), fields

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i):
        c = time.thread_time()
        x, _ = self.data[i]
        out = [x] + [x + k for k in range(1, self.fields)]
        return (*out, time.thread_time() - c)


def one(workers: int, work: int, fields: int, batches: int, skip: int = 10) -> dict:
    it = iter(DataLoader(Timed((batches + skip + 5) * 8, work, fields), batch_size=8, num_workers=workers))
    for _ in range(skip):
        next(it)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    w0 = sum(proc_cpu(p) for p in pids)
    m0, t0, getitem = time.process_time(), time.perf_counter(), 0.0
    for _ in range(batches):
        getitem += float(next(it)[-1].sum())
    wall, main = time.perf_counter() - t0, time.process_time() - m0
    worker = sum(proc_cpu(p) for p in pids) - w0
    ms = 1e3 / batches
    return {"wall": wall * ms, "main": main * ms, "worker": worker * ms, "getitem": getitem * ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batches", type=int, default=150)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus, torch {torch.__version__}")
    print("work fields | getitem in-proc / worker (x) | handoff worker | main | wait   (ms per batch)")
    for work in (1200, 50):
        for fields in (1, 2, 4):
            runs = [(one(0, work, fields, a.batches), one(1, work, fields, a.batches)) for _ in range(a.repeats)]
            med = lambda f: statistics.median(f(p, w) for p, w in runs)  # noqa: E731
            g0, g1 = med(lambda p, w: p["getitem"]), med(lambda p, w: w["getitem"])
            handoff = med(lambda p, w: (w["worker"] - w["getitem"]) - (p["main"] - p["getitem"]))
            print(f"{work:4d} {fields:6d} | {g0:6.2f} / {g1:6.2f} ({g1 / g0:.2f}x) | {handoff:14.2f} | "
                  f"{med(lambda p, w: w['main']):4.2f} | {med(lambda p, w: w['wall'] - w['worker']):4.2f}", flush=True)


if __name__ == "__main__":
    main()
