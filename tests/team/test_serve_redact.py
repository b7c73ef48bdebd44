"""`orch serve` hands out raw run files (repro output, unit logs, the journal) masked by the run's
own Redactor, over real loopback HTTP: tokens by value (bearer, hf_, sk-, URL passwords), the
run's declared secret names, and nothing that only counts tokens. A run written before orch
masked these files on disk is served masked too."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from helpers.report_synth import synthetic_run, write_run
from helpers.serving import serving

RUN = "20260601-070000-old-run"
SECRETS = (
    "eyJhbGciOi.bearer.value",
    "hf_AbCdEfGhIjKlMnOpQrStUv",
    "sk-proj-Abc123def456ghi789jkl0",
    "url-password-1",
    "hub-declared-value",
)
REPRO_OUT = (
    "curl -H 'Authorization: Bearer eyJhbGciOi.bearer.value' https://bob:url-password-1@host.invalid/v1\n"
    "login hf_AbCdEfGhIjKlMnOpQrStUv key sk-proj-Abc123def456ghi789jkl0\n"
    "HF_HUB_AUTH=hub-declared-value\n"
    "flags --max-tokens 1800 tokens=1800\n"
    "CORRUPTION sessions: 1/40\n"
)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    reports = tmp_path_factory.mktemp("serve-redact") / "reports"
    manifest, records = synthetic_run(replicates=1, run_id=RUN)
    manifest = manifest.model_copy(update={"secret_names": ["HF_HUB_AUTH"]})
    first = records[0]
    records[0] = first.model_copy(
        update={"repro": first.repro.model_copy(update={"stdout_tail": REPRO_OUT}) if first.repro else None}
    )
    run_dir = write_run(reports / RUN, manifest, records)
    trial = run_dir / "trials" / "0000"
    (trial / "logs").mkdir(parents=True, exist_ok=True)
    (trial / "repro.out").write_text(REPRO_OUT)
    (trial / "repro.err").write_text("error: sk-proj-Abc123def456ghi789jkl0 rejected\n")
    (trial / "logs" / "decode-unit.log").write_text("server args --api-key hf_AbCdEfGhIjKlMnOpQrStUv --port 1\n")
    with serving(reports) as url:
        yield f"{url}/{RUN}"


@pytest.mark.parametrize(
    "rel", ["trials/0000/repro.out", "trials/0000/repro.err", "trials/0000/logs/decode-unit.log", "journal.jsonl"]
)
def test_served_raw_files_are_masked(base: str, rel: str) -> None:
    with httpx.Client(trust_env=False, timeout=10) as http:
        answer = http.get(f"{base}/{rel}")
    assert answer.status_code == 200
    assert not [s for s in SECRETS if s in answer.text], answer.text
    assert "••••" in answer.text


def test_masking_keeps_what_is_not_secret_and_the_journal_readable(base: str) -> None:
    with httpx.Client(trust_env=False, timeout=10) as http:
        out = http.get(f"{base}/trials/0000/repro.out").text
        journal = http.get(f"{base}/journal.jsonl").text
    assert "--max-tokens 1800 tokens=1800" in out and "CORRUPTION sessions: 1/40" in out
    assert "Authorization: Bearer ••••" in out and "bob:••••@host.invalid" in out and "HF_HUB_AUTH=••••" in out
    lines = [json.loads(line) for line in journal.splitlines()]
    first = next(d for d in lines if d.get("type") == "trial" and d["trial"] == 0)
    assert "--max-tokens 1800" in first["repro"]["stdout_tail"]
