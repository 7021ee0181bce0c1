"""Run one measured task in a fresh interpreter and print {"rss_mb": ...} (peak RSS of this process).

Peak RSS is VmHWM from /proc/self/status: unlike ru_maxrss, Linux keeps it per address space, so
it is not inherited from the (large) benchmark parent across fork + exec.

    python benchmarks/_measure.py perfsleuth|hta|decode|gunzip FILE
"""

import json
import logging
import os
import resource
import sys
import tempfile


def perfsleuth(path):
    from perfsleuth.cli.main import main

    main(["analyze", path], standalone_mode=False)


def hta(path):
    logging.disable(logging.WARNING)
    from hta.trace_analysis import TraceAnalysis

    d = tempfile.mkdtemp(prefix="hta_bench_")
    os.symlink(os.path.abspath(path), os.path.join(d, os.path.basename(path)))
    ta = TraceAnalysis(trace_dir=d)
    ta.get_temporal_breakdown(visualize=False)


def decode(path):
    import msgspec

    with open(path, "rb") as fh:
        msgspec.json.decode(fh.read())


def gunzip(path):
    import gzip

    with open(path, "rb") as fh:
        gzip.decompress(fh.read())


def peak_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    sys.stdout = open(os.devnull, "w")  # the CLI's own summary is not part of the measurement output
    {"perfsleuth": perfsleuth, "hta": hta, "decode": decode, "gunzip": gunzip}[mode](path)
    sys.stdout = sys.__stdout__
    print(json.dumps({"rss_mb": peak_rss_mb()}))
