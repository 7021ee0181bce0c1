"""Issue 37, item 6 (one part): the verdict is said once. The terminal printed `verdict: DATALOADER-BOUND (high)`,
then `dataloader-bound: 96% of each step waits for data; ops 2%`, then `dataloader takes 96% of step time
(material from 10%); ops 2%`. The reason's parts that the text does not say (a stall passed over, a verdict by
default, no fix helps, the saving elsewhere) stay, as `verdict_notes`."""

from perfsleuth.config import Config
from perfsleuth.engine.reconsider import reconsider
from perfsleuth.render.markdown import render_markdown
from perfsleuth.render.terminal import render_terminal
from perfsleuth.report.figures import verdict_said
from report_factory import make_report
from test_verdict_forecasts import SHARE, finding

LOADER = {"dataloader": 0.961, "kernel": 0.017, "sync": 0.0, "transfer": 0.0, "host": 0.023, "communication": 0.0,
          "other": 0.0}


def test_a_material_stall_is_said_once():
    v = reconsider("dataloader-bound", "dataloader takes 96% of step time (material from 10%); ops 2%", LOADER, [],
                   Config(), gpu=False)
    assert v.text == "dataloader-bound: 96% of each step waits for data; ops 2%"
    assert v.notes == []  # the reason says nothing the text does not
    report = {**make_report(device=False), "verdict": v.verdict, "degree": v.degree, "verdict_text": v.text,
              "verdict_reason": v.reason, "verdict_notes": v.notes}
    assert verdict_said(report) == ("96% of each step waits for data; ops 2%", [])
    lines = render_terminal(report).splitlines()
    at = lines.index("verdict: DATALOADER-BOUND (high): 96% of each step waits for data; ops 2%")
    assert lines[at + 1] == "" and "material from 10%" not in "\n".join(lines)
    md = render_markdown(report)
    assert "> 96% of each step waits for data; ops 2%\n" in md and "dataloader takes 96%" not in md


def test_what_the_text_does_not_say_stays():
    """sync 41% passed over for host 32%: the passing over is a note, host's 'material' sentence is not."""
    v = reconsider("sync-bound", "sync takes 41% of step time (material from 10%); kernels 20%", SHARE,
                   [finding("item-sync", "sync", 1.004, 10.0)], Config(), gpu=True)
    assert v.verdict == "host-bound"
    assert v.notes == ["sync takes 41% of the step, but removing it is forecast at 1.00× (item-sync): the device "
                       "would wait elsewhere"]
    # a verdict by default (kernels under half the step, no stall material) keeps decide's reason as a note
    low = {"dataloader": 0.0, "kernel": 0.3, "sync": 0.02, "transfer": 0.0, "host": 0.05, "communication": 0.0,
           "other": 0.63}
    reason = "kernels fill only 30% of step time (under 50%); the largest stall is host at 5%"
    d = reconsider("host-bound", reason, low, [], Config(), gpu=True)
    assert (d.text, d.notes) == ("slightly host-bound: 5% of each step the GPU waits for the host (Python, op "
                                 "dispatch, launches); kernels 30%", [reason])


def test_a_report_without_notes_shows_its_reason_once():
    report = make_report()
    assert verdict_said(report) == ("", ["kernels take 61% of the step and no stall category takes a material share"])


CPU_OPS = {"dataloader": 0.0, "kernel": 0.751, "sync": 0.0, "transfer": 0.0, "host": 0.249, "communication": 0.0,
           "other": 0.0}


def test_a_cpu_run_of_tiny_ops_says_its_kernel_time_is_overhead():
    """Issue 39's unseen helpers: a CPU run read `kernel-bound` (ops 75%) above tiny-ops' "per-op overhead, not
    arithmetic, fills the step". On the CPU the note says why both hold; not on a GPU, not without tiny-ops."""
    tiny = [finding("tiny-ops", "host", 1.147, 6799.0)]
    v = reconsider("kernel-bound", "kernels take 75% of the step", CPU_OPS, tiny, Config(), gpu=False, device="CPU")
    assert v.verdict == "kernel-bound"
    assert v.notes[-1] == ("on the CPU an op's own time counts as kernel time: tiny-ops finds much of it is each "
                           "short op's fixed cost (dispatch, allocation), not arithmetic")
    assert v.reason.endswith(v.notes[-1])
    for gpu, found in ((True, tiny), (False, [finding("fused-optimizer", "host", 1.1, 8905.0)])):
        other = reconsider("kernel-bound", "kernels take 75% of the step", CPU_OPS, found, Config(), gpu=gpu)
        assert not any("counts as kernel time" in n for n in other.notes)
