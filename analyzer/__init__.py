"""perfsleuth: profiler-driven bottleneck analysis for PyTorch training.

Library entry points (the CLI is a thin layer over these):

    >>> from perfsleuth import analyze_path
    >>> report = analyze_path("trace.pt.trace.json.gz")
    >>> report.verdict, report.to_dict()["summary"]["time_share"]

    >>> with perfsleuth.profile() as prof:  # profile a loop in a notebook (docs/run.md)
    ...     train(model, loader)
    >>> prof.report
"""

from .errors import TraceError
from .version import __version__

__all__ = ["TraceError", "__version__", "analyze_path", "analyze_trace", "load_trace", "profile"]


def __getattr__(name):  # lazy: keep `import perfsleuth` cheap (no pandas until needed)
    if name in ("analyze_path", "analyze_trace"):
        from . import api

        return getattr(api, name)
    if name == "load_trace":
        from .trace.model import load_trace

        return load_trace
    if name == "profile":  # needs torch, imported only when profiling starts
        from .record.profile import profile

        return profile
    raise AttributeError(name)
