"""Issue 38, in-process: what `run` writes kept out of the script's reach (record/keep.py), a signal at the end
of --verify held (record/signals.Finishing.interruptible), and which processes are an experiment's own
(verify/child.descendants). The same classes with real processes: tests/e2e/test_verify_ends.py."""

import gzip
import json
import os
import shutil
import signal

import pytest

from perfsleuth.record import outputs as run_outputs
from perfsleuth.record.keep import Keeper
from perfsleuth.record.signals import Finishing, Interrupted
from perfsleuth.verify.child import descendants


def test_a_trace_removed_with_its_folder_is_put_back(tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    (tmp_path / "trace.json").write_text('{"traceEvents": []}')
    keeper = Keeper(out)
    with keeper.watching():
        run_outputs.gzip_json(tmp_path / "trace.json", out / "trace.pt.trace.json.gz")
    assert run_outputs.KEEPERS == []  # told only while watching
    [(place, copy)] = keeper.kept.items()
    assert place == out / "trace.pt.trace.json.gz" and copy.parent == keeper.root
    assert keeper.root.parent == tmp_path and keeper.root.name.startswith(".runs.perfsleuth-")  # beside `runs`
    assert os.stat(copy).st_ino == os.stat(place).st_ino  # a second name, nothing copied
    data = place.read_bytes()
    shutil.rmtree(out)  # the script cleans its run folder
    assert keeper.restore() == [place] and place.read_bytes() == data
    assert keeper.restore() == []  # in place: nothing to do
    keeper.close()
    assert not keeper.root.exists() and place.read_bytes() == data


def test_a_file_the_script_put_at_the_name_is_left_and_perfsleuths_copy_stays(tmp_path):
    out = tmp_path / "runs"
    keeper = Keeper(out)
    (tmp_path / "t.json").write_text('{"a": 1}')
    with keeper.watching():
        run_outputs.gzip_json(tmp_path / "t.json", out / "trace.pt.trace.json.gz")  # makes the folder too
    place = out / "trace.pt.trace.json.gz"
    place.unlink()
    keeper.close()  # gone and not put back: its copy stays, and is said
    [copy] = keeper.lost
    assert copy.is_file() and keeper.root.is_dir()


def test_the_json_perfsleuth_removes_itself_is_not_put_back(tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    raw = out / "trace.pt.trace.json"
    raw.write_text('{"traceEvents": []}')
    keeper = Keeper(out)
    with keeper.watching():
        keeper.keep(raw)
        path, error = run_outputs.finish_trace(run_outputs.RawTrace(raw, out / "trace.pt.trace.json.gz", None),
                                               {"clock": {}})
    assert (path, error) == (out / "trace.pt.trace.json.gz", None) and not raw.exists()
    assert list(keeper.kept) == [path]
    path.unlink()
    assert keeper.restore() == [path] and not raw.exists()


def test_the_json_removed_before_it_is_gzipped_is_put_back_first(tmp_path):
    """The script removes its run folder between the end of the window (the JSON) and the trace's finish."""
    out = tmp_path / "runs"
    out.mkdir()
    raw = out / "trace.pt.trace.json"
    raw.write_text('{"traceEvents": [], "x": 1}')
    keeper = Keeper(out)
    with keeper.watching():
        keeper.keep(raw)
        shutil.rmtree(out)
        path, error = run_outputs.finish_trace(run_outputs.RawTrace(raw, out / "trace.pt.trace.json.gz", None),
                                               {"clock": {}})
    assert (path, error) == (out / "trace.pt.trace.json.gz", None)
    assert json.loads(gzip.decompress(path.read_bytes())) == {"traceEvents": [], "x": 1,
                                                               "perfsleuth_final": {"clock": {}}}


def test_verifys_folder_goes_where_it_was_reserved_or_beside_it(tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    keeper = Keeper(out)
    base = out / "verify"
    reserved = run_outputs._new_folder(base)
    staged = keeper.folder(reserved.name)
    (staged / "children.log").write_text("log")
    shutil.rmtree(out)  # the script removed the reserved folder with its run folder
    assert keeper.place(staged, reserved, base) == reserved and (reserved / "children.log").read_text() == "log"
    # the script made `verify/` and filled it meanwhile: the experiments' files go beside it
    staged = keeper.folder("verify")
    (staged / "job-001.jsonl").write_text("{}\n")
    assert keeper.place(staged, reserved, base) == out / "verify-2"
    assert (out / "verify" / "children.log").read_text() == "log" and (out / "verify-2" / "job-001.jsonl").is_file()
    keeper.close()
    assert not keeper.root.exists()


def test_a_keeper_in_a_forked_child_leaves_the_private_folder_alone(tmp_path):
    out = tmp_path / "runs"
    out.mkdir()
    (out / "t.gz").write_text("x")
    keeper = Keeper(out)
    keeper.keep(out / "t.gz")
    keeper.pid = -1  # as in a child the script forked: its perfsleuth ends there too (forks.ChildExit)
    keeper.close()
    assert keeper.root.is_dir() and len(list(keeper.root.iterdir())) == 1
    (out / "t.gz").unlink()
    assert keeper.restore() == [] and not (out / "t.gz").exists()


def test_a_first_signal_stops_the_experiments_once_and_the_rest_is_held():
    said = []
    finishing = Finishing(said.append, lambda name: said.append(f"again {name}"))
    with finishing.holding():
        with pytest.raises(Interrupted) as raised:
            with finishing.interruptible():
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs between bytecodes
                    pass
        assert raised.value.signum == signal.SIGTERM and said == ["SIGTERM"]
        assert finishing.raising is False and finishing.exit_code == 143
        with finishing.interruptible():  # a signal is pending: nothing more raises here
            assert finishing.raising is False
    with finishing.holding():
        with pytest.raises(Interrupted):  # a second signal in a block that allows it stops at once
            os.kill(os.getpid(), signal.SIGHUP)
            for _ in range(1000):
                pass
    assert said == ["SIGTERM", "again SIGHUP"] and finishing.exit_code == 143 and finishing.stopped


def test_a_signal_outside_the_experiments_is_only_noted():
    said = []
    finishing = Finishing(said.append)
    with finishing.holding():
        with finishing.interruptible():
            pass
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    assert said == ["SIGINT"] and finishing.exit_code == 130


def test_an_experiments_own_processes_are_its_tree_not_its_process_group():
    # pid: (parent, state, ticks); 10 the verify server, 20 a window's process, 21/22 what it started, 23 theirs,
    # 30 a helper an earlier window left (now the server's child), 40 someone else's
    table = {10: (1, "S", 0), 20: (10, "R", 5), 21: (20, "S", 1), 22: (20, "R", 7), 23: (22, "S", 2),
             30: (10, "R", 9), 40: (1, "R", 3)}
    assert descendants(table, 20) == {21, 22, 23}
    assert descendants(table, 10) == {20, 21, 22, 23, 30}
    assert descendants(table, 40) == set()
