"""core.masking: a trial record whose only metric with a unit holds a secret (a lost server scrape's
"GET URL: ..." in a run whose other metrics have no unit) is masked too. Mutation survivor of
core/masking.py (bench/README.md, round ten): tests/test_redact.py's record also had metrics with
plain units, so `!=` -> `==` in "does any unit change" still wrote the masked units there, and
left this record's URL with its password in journal.jsonl, which `orch serve` hands out."""

from __future__ import annotations

from helpers.report_synth import synthetic_run

from orchestrator.core.masking import mask_record
from orchestrator.core.records import MetricValue
from orchestrator.core.redact import REDACTED, Redactor


def test_a_record_whose_every_unit_holds_a_secret_is_masked() -> None:
    _, records = synthetic_run(replicates=1, failures=False)
    r = records[0]
    plain = {name: m.model_copy(update={"unit": ""}) for name, m in r.metrics.items()}  # no unit to mask
    lost = MetricValue(kind="number", value=None, unit="GET https://u:pw1@h:30002/metrics: connection refused")
    leaky = r.model_copy(update={"metrics": {**plain, "server.decode.missing": lost}})
    masked = mask_record(leaky, Redactor())
    said = masked.metrics["server.decode.missing"].unit
    assert said == f"GET https://u:{REDACTED}@h:30002/metrics: connection refused", said
    assert "pw1" not in masked.model_dump_json()
    assert {k: v for k, v in masked.metrics.items() if k != "server.decode.missing"} == plain
