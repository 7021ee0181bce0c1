"""The memory window's categories budget (record/memory_window.py `_events`, RunConfig
memory_categories_events) counts the op and allocation events torch's memory profile walks, not the
Python function events `with_stack` records (a Lightning loop over a Python Dataset recorded 47,818
events in 3 steps, and torch's memory profile took 8 s for them)."""

from types import SimpleNamespace

from perfsleuth.record.memory_window import _events


class Event:
    def __init__(self, python: bool):
        self.python = python

    def is_python_function(self) -> bool:
        return self.python


def prof(ops: int, python: int):
    events = [Event(False)] * ops + [Event(True)] * python
    return SimpleNamespace(profiler=SimpleNamespace(
        kineto_results=SimpleNamespace(events=lambda: events)))


def test_python_function_events_are_not_counted():
    assert _events(prof(ops=12_000, python=35_000)) == 12_000
    assert _events(prof(ops=0, python=5)) == 0


def test_a_profiler_without_the_results_counts_as_unknown():
    assert _events(SimpleNamespace(profiler=None)) is None
