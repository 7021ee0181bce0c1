"""dataloader-slow on a loader in the training process (issue 37: the loader's real cause): what
fills the Dataset's time, from the python stacks -- decoding, I/O, Python or per-sample tensor ops
-- its fix, and for decoding and I/O a forecast of caching them
(analysis/forecast/models/loader_work.py)."""

import pytest
from tracebuilder_rules import SINGLE_LOADER, RuleTraceBuilder, analyze, fired, run_metadata

ITEM = 700  # µs per __getitem__; 8 per batch, one batch per 10 ms step


def cause_trace(cause: str, device: bool = False) -> RuleTraceBuilder:
    """Three 10 ms steps: the loader's __next__ takes 6 ms; inside it torch's fetch calls the
    Dataset's `__getitem__` (data.py:20) 8 times, 700 µs each, then the default collate stacks (150
    µs, its built-in stack holding a 140 µs aten::stack: the DataLoader's own work, once per batch,
    not the Dataset's); 3.8 ms of compute follow. Inside each __getitem__, by `cause`: 500 µs of PIL
    decoding (a decoder built-in of 450 µs in it), of a file read, of a Python helper, or of
    sleeping; or (tensor) a Tensor.flip call of 100 µs and two torch ops of 150 µs run from
    __getitem__'s own lines (no frame of their own)."""
    tb = RuleTraceBuilder(device=device, rank=None)
    for s in range(3):
        t0 = s * 10_000
        tb.step(s + 1, t0, 10_000)
        tb.annotation(SINGLE_LOADER, t0, 6000)
        nxt = tb.py("torch/utils/data/dataloader.py(700): __next__", t0 + 1, 5998)
        fetch = tb.py("torch/utils/data/_utils/fetch.py(49): fetch", t0 + 2, 5990, parent=nxt)
        for k in range(8):
            a = t0 + 100 + k * ITEM
            item = tb.py("data.py(20): __getitem__", a, ITEM, parent=fetch)
            if cause == "decoding":
                load = tb.py("PIL/ImageFile.py(250): load", a + 100, 500, parent=item)
                tb.py("<built-in method decode of ImagingDecoder object at 0x7f>", a + 110, 450, parent=load)
            elif cause == "I/O":
                tb.py("<built-in method read of _io.BufferedReader object at 0x7f>", a + 100, 500, parent=item)
            elif cause == "Python":
                tb.py("data.py(8): tokenize", a + 100, 500, parent=item)
            elif cause == "sleeping":
                tb.py("<built-in function sleep>", a + 100, 500, parent=item)
            else:
                tb.py("<built-in method flip of Tensor object at 0x7f>", a + 50, 100, parent=item)
                tb.op("aten::flip", a + 55, 90)
                tb.op("aten::mul", a + 200, 150)
                tb.op("aten::add", a + 400, 150)
        collate = tb.py("torch/utils/data/_utils/collate.py(300): default_collate", t0 + 5720, 200, parent=fetch)
        tb.py("<built-in method stack of type object at 0x7f>", t0 + 5730, 150, parent=collate)
        tb.op("aten::stack", t0 + 5735, 140)
        if device:
            tb.launch("gemm", host=(t0 + 6100, 5), device=(t0 + 6110, 3800))
        else:
            tb.op("aten::mm", t0 + 6100, 3800)
    tb.run_metadata = run_metadata(cores=2, workers=0)
    return tb


def _facts(facts) -> tuple:
    return tuple(facts[k] for k in ("loader_work_us_per_step", "loader_work_share", "loader_cause",
                                    "loader_cause_us_per_step", "loader_cause_share"))


HEAD = ("The training loop waits 6.00 ms per step (60.0% of step time) for the DataLoader, which runs in "
        "the training process (num_workers=0).\n")


@pytest.mark.parametrize("cause, said", [("decoding", "decoding"), ("I/O", "I/O")])
def test_decoding_or_io_is_named_with_its_line_and_a_caching_forecast(tmp_path, cause, said):
    """Each __getitem__'s 500 µs of decoding (or reading): 4000 of the loader's 6000 µs per step.
    The Dataset's work: 8 x 700 µs, 5600 µs (the collate's stack is not the Dataset's); the rest of
    the __getitem__ is its own Python (8 x 200 µs). Caching removes the 4000 µs: 10 ms -> 6 ms,
    1.667x."""
    report, facts = analyze(cause_trace(cause), tmp_path)
    assert _facts(facts) == (5600.0, 0.9333, cause, 4000.0, 0.6667)
    both = fired(report)
    f = both["dataloader-slow"]
    assert f["message"] == (
        HEAD + f"66.7% of the loader's time is {said} in `MyDataset.__getitem__`: every sample is "
        f"{'decoded' if cause == 'decoding' else 'read'} again each time it is loaded, every epoch.\n"
        "It comes from `__getitem__` (`data.py:20`), 93.3% of the loader's time; inside it: "
        f"{said} 71%, Python 29%.")
    assert f["ceiling"]["saving_us"] == 4000.0
    fc = f["forecast"]
    assert (fc["kind"], fc["model"]) == ("forecast", "dataloader-sample-work")
    assert fc["speedup"] == pytest.approx(10_000 / 6000, abs=0.002)
    assert fc["saving_us"] == pytest.approx(4000.0, abs=5)
    a = fc["assumptions"]
    assert a["removed"] == (f"the {said} measured inside the loader's __next__ goes: 4000 µs per step, "
                            "67% of the loader's time in the replayed steps")
    assert a["stays"] == ("the rest of each sample's work (Python) and the DataLoader's own work "
                          "(fetch, collate) stay as recorded")
    assert "second epoch" in a["epochs"] and a["pessimistic"].startswith("10% of that time stays")
    # pessimistic: 3600 µs removed, 10 ms -> 6.4 ms
    assert fc["low"] <= 10_000 / 6400 + 0.002
    text = f["message"] + f["fix"]
    assert "GPU" not in text and "cuda" not in text  # a CPU run never hears of the GPU
    if cause == "decoding":
        assert "self.decoded[i] = Image.open" in f["fix"]
    else:
        assert "self.raw[i] = f.read()" in f["fix"] and "numpy.memmap" in f["fix"]
    # num-workers fires on the same loader and says the same loader time
    assert both["num-workers"]["message"].startswith("The training loop waits 6.00 ms per step (60.0%")


def test_decoding_on_a_gpu_may_move_to_the_gpu(tmp_path):
    report, _ = analyze(cause_trace("decoding", device=True), tmp_path)
    f = fired(report)["dataloader-slow"]
    assert f["message"].startswith("The GPU waits 6.00 ms per step")
    assert 'decode on the GPU (`torchvision.io.decode_jpeg(..., device="cuda")`' in f["fix"]


def test_python_is_named_and_not_forecast(tmp_path):
    """__getitem__'s own 200 µs and tokenize's 500 µs are Python: 5600 µs per step."""
    report, facts = analyze(cause_trace("Python"), tmp_path)
    assert _facts(facts) == (5600.0, 0.9333, "Python", 5600.0, 0.9333)
    f = fired(report)["dataloader-slow"]
    assert f["message"] == (
        HEAD + "93.3% of the loader's time is the Dataset's own Python in `MyDataset.__getitem__`, run one "
        "sample at a time.\nIt comes from `__getitem__` (`data.py:20`), 93.3% of the loader's time; inside it: "
        "Python 100%.")
    assert f["ceiling"]["saving_us"] == 5600.0
    assert f["forecast"]["kind"] == "none"
    assert f["forecast"]["reason"].startswith("the Dataset's Python precomputed or vectorised")
    assert "in `__init__`" in f["fix"] and "GPU" not in f["message"] + f["fix"]


def test_tensor_ops_run_from_python_lines_count_as_tensor_ops(tmp_path):
    """Per __getitem__: the flip call 100 µs, and 300 µs of torch ops run from its own lines, which
    the stacks alone would call Python: 8 x 400 = 3200 µs per step, 53.3%. The loader's torch ops,
    the collate's stack among them, are 25 per step."""
    report, facts = analyze(cause_trace("tensor"), tmp_path)
    assert _facts(facts) == (5600.0, 0.9333, "per-sample tensor ops", 3200.0, 0.5333)
    assert (facts["loader_ops_per_step"], facts["loader_ops_per_sample"]) == (25.0, 3.125)
    f = fired(report)["dataloader-slow"]
    assert f["message"] == (
        HEAD + "53.3% of the loader's time is per-sample tensor ops: 25 torch ops per step, 3.125 per sample, run "
        "one sample at a time in `MyDataset.__getitem__`.\nIt comes from `__getitem__` (`data.py:20`), 93.3% of "
        "the loader's time; inside it: tensor ops 57%, Python 43%.")  # the site's split: the same rule
    assert f["ceiling"]["saving_us"] == 3200.0
    assert f["forecast"]["kind"] == "none"
    assert f["forecast"]["reason"].startswith("the per-sample work done once per batch instead")
    assert "x = (x - mean) / std" in f["fix"] and "GPU" not in f["message"] + f["fix"]
    assert "non_blocking" not in f["fix"]


def test_tensor_ops_on_a_gpu_go_to_the_device(tmp_path):
    report, _ = analyze(cause_trace("tensor", device=True), tmp_path)
    f = fired(report)["dataloader-slow"]
    assert ".to(device, non_blocking=True)" in f["fix"] and "on the GPU" in f["fix"]


def test_a_sleeping_dataset_is_left_to_num_workers(tmp_path):
    """Sleeping fills 4000 µs: workers overlap waits; no fix of the sample's work is named."""
    report, facts = analyze(cause_trace("sleeping"), tmp_path)
    assert _facts(facts) == (5600.0, 0.9333, "sleeping or waiting", 4000.0, 0.6667)
    both = fired(report)
    assert "dataloader-slow" not in both and "num-workers" in both


def test_a_run_without_stacks_takes_the_split_from_its_stacks_window(tmp_path):
    """`perfsleuth run`'s main trace has no stacks; its stacks window (the decoding trace above, its
    loader 6000 µs per step) says decoding fills 66.67% of the loader's time. The main trace's
    loader takes 4500 µs of its 10 ms steps: the cause is 4500 x 0.6667 = 3000.15 µs per step (one
    loader time: the main trace's); the site's share is of the window's loader (5600 of 6000 µs).
    The forecast takes 66.67% off each __next__ of the replayed steps: 10 ms -> 7 ms, 1.43x."""
    cause_trace("decoding").write(tmp_path / "t.stacks.pt.trace.json.gz")
    tb = RuleTraceBuilder(device=False, rank=None)
    for s in range(3):
        t0 = s * 10_000
        tb.step(s + 1, t0, 10_000)
        tb.annotation(SINGLE_LOADER, t0, 4500)
        tb.op("aten::mm", t0 + 4600, 5300)
    tb.run_metadata = {**run_metadata(cores=2, workers=0), "stacks_trace": "t.stacks.pt.trace.json.gz"}
    report, facts = analyze(tb, tmp_path, name="t.pt.trace.json.gz")
    f = fired(report)["dataloader-slow"]
    assert f["evidence"]["loader_cause"] == "decoding" and f["evidence"]["loader_cause_share"] == 0.6667
    assert f["evidence"]["loader_cause_us_per_step"] == 3000.15 == f["ceiling"]["saving_us"]
    assert f["message"] == (
        "The training loop waits 4.50 ms per step (45.0% of step time) for the DataLoader, which runs in the "
        "training process (num_workers=0).\n66.7% of the loader's time is decoding in `MyDataset.__getitem__`: "
        "every sample is decoded again each time it is loaded, every epoch.\nIt comes from `__getitem__` "
        "(`data.py:20`), 93.3% of the loader's time; inside it: decoding 71%, Python 29%.")
    fc = f["forecast"]
    assert fc["kind"] == "forecast" and fc["speedup"] == pytest.approx(10_000 / 7000, abs=0.002)
    assert fc["assumptions"]["removed"] == (
        "the decoding goes: 67% of the loader's time, as the stacks window measured it inside __getitem__, from "
        "each __next__ of the replayed steps (3000 µs per step)")
    assert fired(report)["num-workers"]["message"].startswith("The training loop waits 4.50 ms per step")


def test_the_datasets_work_is_what_its_code_runs_torchs_included():
    """One __next__ window [0, 1000) ns: the profiler's hook (torch, 10) and the collate's own stack
    (a built-in under fetch, 40) are not the Dataset's; __getitem__ (900) is, and so is torch's pad
    it calls (200, of which its built-in constant_pad_nd 100 is tensor ops, the rest Python by its
    caller) and an aten::add run from __getitem__'s own line (100: tensor ops, not Python)."""
    import numpy as np
    import pandas as pd
    from perfsleuth.analysis import intervals as iv
    from perfsleuth.analysis.frame_work import CLASSES, PYTHON, TENSOR, loader_work

    rows = [  # name, ts, end, id, parent
        ("torch/autograd/profiler.py(844): _maybe_cupti_monitor", 0, 10, 1, -1),
        ("torch/utils/data/_utils/fetch.py(49): fetch", 20, 990, 2, -1),
        ("data.py(20): __getitem__", 30, 930, 3, 2),
        ("torch/nn/functional.py(4000): pad", 40, 240, 4, 3),
        ("<built-in method constant_pad_nd of type object at 0x7f>", 50, 150, 5, 4),
        ("<built-in method stack of type object at 0x7f>", 940, 980, 6, 2),
    ]
    frames = pd.DataFrame(rows, columns=["name", "ts", "end", "py_id", "py_parent"])
    window = (np.array([0]), np.array([1000]))
    work = loader_work(frames, window, iv.merge(np.array([55, 300]), np.array([145, 400])))
    assert work.work_ns == 900 and CLASSES[work.cause] == "Python"
    assert dict(zip(CLASSES, work.class_ns.tolist())) == {
        "tensor ops": 200.0, "sleeping or waiting": 0.0, "I/O": 0.0, "decoding": 0.0, "Python": 700.0}
    assert [a.tolist() for a in work.spans[TENSOR]] == [[50], [150]]  # the moved op stays in Python's spans
    assert [a.tolist() for a in work.spans[PYTHON]] == [[30, 150], [50, 930]]
