"""`perfsleuth run` on scripts that fail in the ways real ones do: a syntax error, a crashing
DataLoader worker, sys.exit(3), a real SIGINT from outside. Clear message, the script's exit code,
the partial trace kept when there is one, never perfsleuth's own traceback."""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from perfsleuth.cli.main import main

SMALL = ["--wait", "1", "--warmup", "1", "--active", "3"]

TRAIN = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset

class Samples(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        {getitem}
        return torch.randn(8), torch.randn(2)

model = torch.nn.Linear(8, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step, (x, y) in enumerate(DataLoader(Samples(), batch_size=4, num_workers={workers})):
    {body}
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    print("step", step, flush=True)
"""


def script(tmp_path: Path, name="train.py", getitem="pass", body="pass", workers=0) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(TRAIN).format(getitem=getitem, body=body, workers=workers))
    return path


def run(*args):
    result = CliRunner().invoke(main, ["run", *map(str, args)], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_syntax_error_is_the_users_not_ours(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\ndef train(:\n    pass\n")
    code, out, err = run(*SMALL, "-o", tmp_path / "o", bad)
    assert code == 1
    assert "SyntaxError" in err and 'broken.py", line 2' in err
    assert "perfsleuth/record/session.py" not in err and "runpy" not in err and "click" not in err
    assert "verdict" not in out and not (tmp_path / "o" / "report.json").exists()


def test_dataloader_worker_crash(tmp_path):
    path = script(tmp_path, getitem="if i == 8:\n            import os; os._exit(7)", workers=1)
    code, out, err = run(*SMALL, "-o", tmp_path / "o", path)
    assert code == 1
    assert "DataLoader worker" in err and "exited unexpectedly" in err
    assert "perfsleuth: the script raised RuntimeError" in err
    assert "perfsleuth/record/session.py" not in err


def test_sys_exit_3_after_the_window_keeps_the_report(tmp_path):
    path = script(tmp_path, body="if step == 8:\n        sys.exit(3)")
    code, out, err = run(*SMALL, "--full", "-o", tmp_path / "o", path)
    assert code == 3
    assert "verdict:" in out
    rep = json.loads((tmp_path / "o" / "report.json").read_text())
    assert len(rep["steps"]) == 3


def test_sys_exit_3_before_any_step(tmp_path):
    path = script(tmp_path, body="sys.exit(3)")
    code, out, err = run(*SMALL, "-o", tmp_path / "o", path)
    assert code == 3
    assert "verdict" not in out and not (tmp_path / "o" / "report.json").exists()


@pytest.mark.parametrize("sig,code,said", [(signal.SIGINT, 130, "interrupted:"),
                                           (signal.SIGTERM, 143, "interrupted (SIGTERM):"),
                                           (signal.SIGHUP, 129, "interrupted (SIGHUP):")])
def test_a_real_signal_during_the_window_reports_what_was_collected(tmp_path, sig, code, said):
    """Ctrl-C, and the SIGTERM/SIGHUP that timeout, CI cancellation, Kubernetes and Slurm send (issue 18):
    the partial data is kept and said, exit 128 + the signal."""
    path = script(tmp_path, body="time.sleep(0.05)")
    out_dir = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "perfsleuth.cli.main", "run", "--wait", "1", "--warmup", "1",
                             "--active", "50", "-o", str(out_dir), str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"},
                            # the signal's default action, whatever the suite inherited: under `nohup` SIGHUP is
                            # ignored, perfsleuth rightly leaves that alone, and the run ends normally (exit 0)
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    deadline = time.monotonic() + 90
    for line in proc.stdout:  # the script's own progress lines
        if line.startswith("step 6") or time.monotonic() > deadline:
            break
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == code, err
    assert f"perfsleuth: {said} the report covers the" in err
    assert "Traceback" not in err
    rep = json.loads((out_dir / "report.json").read_text())
    assert 3 <= len(rep["steps"]) < 50
    trace = next(out_dir.glob("*.pt.trace.json.gz"))
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
