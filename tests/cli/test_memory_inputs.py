"""A run's memory companion is one of the user's inputs: `analyze` of the main trace, with its
output in the input folder, never writes over it (nor over the trace or its stacks companion),
--force or not."""

from click.testing import CliRunner
from memorybuilder import leaky
from perfsleuth.cli.main import main


def run_folder(tmp_path):
    """A run's folder: the main trace without allocator events naming its memory companion."""
    main_tb = leaky(steps=3)
    main_tb.events = [e for e in main_tb.events if e["ph"] != "i"]
    main_tb.run_metadata = {"version": 1, "memory_trace": "trace.memory.pt.trace.json.gz"}
    trace = main_tb.write(tmp_path / "trace.pt.trace.json.gz")
    leaky(steps=3, leak=0).write(tmp_path / "trace.memory.pt.trace.json.gz")
    return trace


def test_output_in_the_input_folder_writes_over_none_of_the_inputs(tmp_path):
    trace = run_folder(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    ok = CliRunner().invoke(main, ["analyze", str(trace), "-o", str(tmp_path), "--force"])
    assert ok.exit_code == 0, ok.output
    assert "memory" in (tmp_path / "report.json").read_text()
    for target in ("trace.memory.pt.trace.json.gz", "trace.pt.trace.json.gz"):
        for option in ("--json", "--html", "--markdown"):
            result = CliRunner().invoke(
                main, ["analyze", str(trace), option, str(tmp_path / target), "--force"])
            assert result.exit_code == 2, result.output
            line = result.output.strip().splitlines()[-1]
            assert "is the input" in line and target in line and "Traceback" not in result.output
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name in before} == before
