"""How each rule's forecasts fared on programs the models were not fitted to (docs/accuracy.md, "On programs the
models were not fitted to"): per rule, the findings whose forecast and `perfsleuth run --verify` measurement are both
in the committed results (fixtures/accuracy/unseen/*.json) made after the rule's model last changed, how many forecasts were right (within 0.67-1.5x of the
measurement, and at most 1.2x where the fix measured below 1.1x), and the programs where one was not.

A forecast of a rule that missed there is still shown, but it rates its finding at most medium and says so, with
`--verify` as the way to know (report/numbers.forecast_severity; report/figures.number_text). Before issue 37 item 4
the worker and thread models, right on every fitted fixture, forecast 1.5-2.3x there for fixes that measured
0.59-1.11x; the thread model gives no number since, and the worker model none where torch's threads and the
workers crowd the cores (benchmarks/unseen_report.MODEL_CHANGED drops the runs before).

Written from the results by `benchmarks/unseen_report.rule_record`; tests/e2e/test_unseen_bench.py checks that this is
what the committed results give. Data, no imports.
"""

SOURCE = "docs/accuracy.md"
RECORD = {
    "dataloader-slow": {"checked": 1, "right": 1, "missed": []},
    "fused-optimizer": {"checked": 16, "right": 16, "missed": []},
    "num-workers": {"checked": 2, "right": 2, "missed": []},
}


def of(rule: str):
    """The rule's record, or None where none of its forecasts was checked on such a program."""
    r = RECORD.get(rule)
    return {**r, "missed": list(r["missed"]), "source": SOURCE} if r else None
