"""Where the time of one `perfsleuth analyze` goes: the stages timed in one process.

    python benchmarks/stages.py FILE [--jobs N] [--repeat 3]

Each run is a fresh interpreter (imports included, as for the CLI): imports, reading and decoding
(document.decode_events, in forked workers with --jobs > 1), assembling the event table, analysis.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

_RUN = r"""
import sys, time
t0 = time.perf_counter()
from pathlib import Path
from perfsleuth import api
from perfsleuth.trace import document, kineto, model as T
from perfsleuth.trace.hugepages import without_huge_pages
t1 = time.perf_counter()
path, jobs, warnings = Path(sys.argv[1]), int(sys.argv[2]), []
with without_huge_pages():
    buf = kineto.read_file(path)
    header, outs, _ = document.decode_events(path, buf, warnings, T._chunk_frame, jobs)
    t2 = time.perf_counter()
    del buf
    trace = T.Trace(path=str(path), events=T._empty_frame())
    T._read_header(trace, header)
    frames = [T._take_chunk(o, trace) for o in outs]
    del outs
    trace.events = T._assemble(frames, trace)
    trace.device_type = T._device_type(trace, header)
    t3 = time.perf_counter()
    api.analyze_trace(trace)
    t4 = time.perf_counter()
print(f"imports {t1 - t0:.2f} s, read+decode {t2 - t1:.2f} s, assemble {t3 - t2:.2f} s, "
      f"analysis {t4 - t3:.2f} s, total {t4 - t0:.2f} s")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("file")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for _ in range(args.repeat):
        subprocess.run([sys.executable, "-c", _RUN, args.file, str(args.jobs)], check=True)


if __name__ == "__main__":
    main()
