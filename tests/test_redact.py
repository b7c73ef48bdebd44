"""Redaction is a value: a Redactor knows the secret name patterns plus the names a matrix (or a
run's manifest) declares, and nothing one matrix declares reaches another's outputs."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import pytest

from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.plan import make_plan
from orchestrator.core.records import RunManifest
from orchestrator.core.redact import REDACTED, Redactor
from orchestrator.store.planrecord import make_manifest

REPO = Path(__file__).resolve().parent.parent

MATRIX = """
name: t
repro:
  command: "true"
  metrics: {x: {regex: 'x=(?P<value>\\d+)'}}
factors:
  hub: {levels: {a: {decode: {HF_HUB_AUTH: "value-a"}}, b: {decode: {HF_HUB_AUTH: "value-b"}}}}
"""


def test_name_patterns_are_secret_without_declarations() -> None:
    plain = Redactor()
    assert plain.is_secret_name("HF_TOKEN") and plain.is_secret_name("db_password")
    assert not plain.is_secret_name("HF_HUB_AUTH")
    assert plain.value("API_KEY", "abc") == REDACTED and plain.value("TP", "8") == "8"
    assert plain.text("HF_HUB_AUTH=abc TP=8") == "HF_HUB_AUTH=abc TP=8"


def test_declared_names_are_masked_as_values_and_in_text() -> None:
    r = Redactor.for_names(["HF_HUB_AUTH", "AUTH"])
    assert r.is_secret_name("HF_HUB_AUTH") and r.value("HF_HUB_AUTH", "abc") == REDACTED
    assert not r.is_secret_name("hf_hub_auth")  # declared names are exact, as env names are
    text = 'HF_HUB_AUTH=abc AUTH: "x y" MY_AUTH_MODE=on {"HF_HUB_AUTH": "q"} HF_TOKEN=t'
    assert r.text(text) == (
        f'HF_HUB_AUTH={REDACTED} AUTH: "{REDACTED}" MY_AUTH_MODE=on {{"HF_HUB_AUTH": "{REDACTED}"}} HF_TOKEN={REDACTED}'
    )


def test_a_redactor_is_a_frozen_value() -> None:
    r = Redactor.for_names(["B", "A"])
    assert r == Redactor.for_names(["A", "B"]) and hash(r) == hash(Redactor(frozenset({"A", "B"})))
    with pytest.raises(AttributeError):
        r.declared = frozenset()  # type: ignore[misc]
    twin = pickle.loads(pickle.dumps(r))
    assert twin == r and twin.text("A=1") == f"A={REDACTED}"


def _matrix(tmp_path: Path, name: str, extra: str = ""):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(MATRIX) + extra)
    return read_matrix(path)


def test_a_matrix_declaration_stays_with_that_matrix(tmp_path: Path) -> None:
    declaring = _matrix(tmp_path, "declaring", "secrets: [HF_HUB_AUTH]\n")
    other = _matrix(tmp_path, "other")  # read after, in the same process
    assert declaring.secrets == ("HF_HUB_AUTH",)
    assert declaring.redactor.value("HF_HUB_AUTH", "v") == REDACTED
    assert other.redactor.value("HF_HUB_AUTH", "v") == "v"
    assert Redactor().value("HF_HUB_AUTH", "v") == "v"


def _manifest(secret_names: list[str]) -> RunManifest:
    return RunManifest(
        run_id="r",
        name="t",
        orch_version="0",
        matrix_path="m.yaml",
        matrix_text="",
        matrix_sha256="",
        inventory_path="i.yaml",
        inventory_text="",
        inventory_sha256="",
        testbed="local",
        seed=1,
        order="randomized",
        replicates=1,
        factors={},
        baseline={},
        metrics={},
        started="now",
        secret_names=secret_names,
    )


def test_a_run_manifest_carries_its_declared_secrets_to_later_renders() -> None:
    saved = _manifest(["HF_HUB_AUTH"]).model_dump_json()
    loaded = RunManifest.model_validate_json(saved)  # another process, later: nothing declared there
    assert loaded.redactor == Redactor.for_names(["HF_HUB_AUTH"])
    assert loaded.redactor.text("HF_HUB_AUTH=v") == f"HF_HUB_AUTH={REDACTED}"
    assert _manifest([]).redactor.text("HF_HUB_AUTH=v") == "HF_HUB_AUTH=v"


def test_a_new_runs_manifest_records_and_applies_its_matrix_declarations(tmp_path: Path) -> None:
    inventory = read_inventory(REPO / "inventory/local.yaml")
    declaring = _matrix(tmp_path, "declaring", "secrets: [HF_HUB_AUTH]\n")
    manifest = make_manifest(make_plan(declaring, inventory.testbed(None), 1), inventory, "r", "now")
    assert manifest.secret_names == ["HF_HUB_AUTH"] and manifest.texts_redacted
    assert "value-a" not in manifest.model_dump_json() and f'HF_HUB_AUTH: "{REDACTED}"' in manifest.matrix_text
    other = _matrix(tmp_path, "other")
    manifest = make_manifest(make_plan(other, inventory.testbed(None), 1), inventory, "r", "now")
    assert manifest.secret_names == [] and "value-a" in manifest.matrix_text


def test_a_report_masks_what_its_manifest_declares() -> None:
    """What a re-rendered report shows comes from the run's manifest, not from this process:
    the same records render masked with the run's declaration and plain without it."""
    from helpers.report_synth import synthetic_run

    from orchestrator.report.build import build_report

    manifest, records = synthetic_run(replicates=1, failures=False)
    leaky = [
        r.model_copy(update={"env": {**r.env, "decode": {**r.env["decode"], "HF_HUB_AUTH": "hub-value"}}})
        for r in records
    ]
    declared = manifest.model_copy(update={"secret_names": ["HF_HUB_AUTH"]})
    assert "hub-value" not in build_report(declared, leaky).model_dump_json()
    assert "hub-value" in build_report(manifest, leaky).model_dump_json()


# ----------------------------------------------------------------------------- issue 13: by value, no false masking
def test_flag_and_variable_names_that_only_count_tokens_are_not_secret() -> None:
    plain = Redactor()
    for name in (
        "--max-tokens",
        "MAX_TOKENS",
        "--max-new-tokens",
        "TOKENIZER_PATH",
        "--tokenizer-path",
        "KV_KEYS",
        "sglang:token_usage",
        "max_token_len",
        "HF_TOKEN_PATH",
    ):
        assert not plain.is_secret_name(name), name
    for name in ("HF_TOKEN", "--api-key", "--hf-token", "apiKey", "accessToken", "OPENAI_APIKEY", "DB_PASSWD"):
        assert plain.is_secret_name(name), name
    command = "repro --max-tokens 1800 --max-new-tokens=64 MAX_TOKENS=5 --api-key abc123 --port 30000"
    assert (
        plain.text(command)
        == f"repro --max-tokens 1800 --max-new-tokens=64 MAX_TOKENS=5 --api-key {REDACTED} --port 30000"
    )
    assert plain.text("the token expired; tokens=1800") == "the token expired; tokens=1800"
    assert plain.text('{"token_usage": 0.5, "num_tokens": 3}') == '{"token_usage": 0.5, "num_tokens": 3}'


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("Authorization: Bearer eyJhbGciOi.payload.sig", f"Authorization: Bearer {REDACTED}"),
        ('curl -H "authorization: Basic dXNlcjpwdw==" x', f'curl -H "authorization: Basic {REDACTED}" x'),
        ('{"Authorization": "token abcdefgh"}', f'{{"Authorization": "token {REDACTED}"}}'),
        ("sent bearer abcdefghijkl to the router", f"sent bearer {REDACTED} to the router"),
        ("login hf_AbCdEfGhIjKlMnOpQrStUvWx ok", f"login {REDACTED} ok"),
        ("key=sk-proj-Abc123def456ghi789jkl0 done", f"key={REDACTED} done"),
        ("OPENAI=sk-Abc123def456ghi789jkl0mno", f"OPENAI={REDACTED}"),
        ("push ghp_abcdefghijklmnopqrstuvwxyz0123 now", f"push {REDACTED} now"),
        ("url https://user:pw%40x@host:8080/path?q=1", f"url https://user:{REDACTED}@host:8080/path?q=1"),
        (
            "git clone https://oauth2:glpat-xyz@gitlab.example/x.git",
            f"git clone https://oauth2:{REDACTED}@gitlab.example/x.git",
        ),
    ],
)
def test_secret_values_are_masked_whatever_they_are_called(text: str, shown: str) -> None:
    assert Redactor().text(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "pip install scikit-learn sk-learn-is-a-library-name-here",
        "ssh://root@host:22 and git@github.com:org/repo.git",
        "https://host:8080/v1/chat/completions",
        "hf_transfer enabled; ghost_town; sk-short",
        "Authorization header missing",
        "SGLANG_DSV4_BF16_INDEX_K=1 TP=8 --port 30000",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert Redactor().text(text) == text


def test_known_secret_values_are_masked_in_any_text_and_never_stored() -> None:
    r = Redactor.for_names(["HUB"], ["plainvalue42", "1"])
    assert r.text("echo plainvalue42; exit 1") == f"echo {REDACTED}; exit 1"  # "1" is too short to search for
    assert r == Redactor.for_names(["HUB"], ["plainvalue42", "1"]) and "plainvalue42" not in repr(r)
    assert r.value("COMMENT", "x plainvalue42") == f"x {REDACTED}"


@pytest.mark.timeout(120)  # a hang guard: a backtracking pattern took ~16 s per MB here, and hours on longer runs
def test_masking_a_megabyte_of_output_leaves_plain_text_alone() -> None:
    """Speed is bench/bench_redact.py's job; here: a megabyte of ordinary log lines and a megabyte
    of one name-like run (the input that made an earlier pattern backtrack) come back unchanged,
    and a secret after that run is still masked."""
    text = "INFO request done tokens=1800 latency=0.5s path=/v1/chat\n" * 18_000  # ~1 MB
    assert Redactor().text(text) == text
    run = "a" * 1_000_000
    assert Redactor().text(run + "TOKEN") == run + "TOKEN"
    assert Redactor().text(run + " token=hf_abcdefghijklmnop") == f"{run} token={REDACTED}"


def test_a_trial_record_is_masked_before_it_is_written() -> None:
    from helpers.report_synth import synthetic_run

    from orchestrator.core.masking import mask_record
    from orchestrator.core.records import Failure

    _, records = synthetic_run(replicates=1, failures=False)
    r = records[0]
    assert r.repro is not None
    leaky = r.model_copy(
        update={
            "repro": r.repro.model_copy(
                update={"command": "repro --api-key abc123 --max-tokens 1800", "stdout_tail": "Bearer abcdefghijk"}
            ),
            "failure": Failure(
                kind="workload", error="E", message="https://u:pw1@h/x", detail="hf_AbCdEfGhIjKlMnOpQrSt"
            ),
        }
    )
    masked = mask_record(leaky, Redactor())
    assert masked.repro is not None and masked.failure is not None
    assert masked.repro.command == f"repro --api-key {REDACTED} --max-tokens 1800"
    assert masked.repro.stdout_tail == f"Bearer {REDACTED}" and masked.failure.message == f"https://u:{REDACTED}@h/x"
    assert masked.failure.detail == REDACTED and mask_record(r, Redactor()) == r


def test_a_lost_readings_reason_is_masked_in_the_journal() -> None:
    """A server scrape or GPU reading lost in a trial is journaled as `<prefix>.missing` with why in
    its unit field ("GET URL: ..."): a URL with credentials went into journal.jsonl, which `orch
    serve` hands out, unmasked (the export audit: the export masked it, the journal did not)."""
    from helpers.report_synth import synthetic_run

    from orchestrator.core.masking import mask_record
    from orchestrator.core.records import MetricValue

    _, records = synthetic_run(replicates=1, failures=False)
    r = records[0]
    why = "GET https://u:pw1@h:30002/metrics: connection refused"
    lost = MetricValue(kind="number", value=None, unit=why)
    leaky = r.model_copy(update={"metrics": {**r.metrics, "server.decode.missing": lost}})
    masked = mask_record(leaky, Redactor())
    said = masked.metrics["server.decode.missing"].unit
    assert said == f"GET https://u:{REDACTED}@h:30002/metrics: connection refused", said
    assert {k: v for k, v in masked.metrics.items() if k != "server.decode.missing"} == r.metrics  # units unchanged


def test_the_processes_a_repro_left_behind_are_masked_in_the_journal_and_the_report() -> None:
    """ReproOutcome.left_behind quotes command lines (a load generator started with a token)."""
    from helpers.report_synth import synthetic_run

    from orchestrator.core.masking import mask_record
    from orchestrator.report.build import redacted_json

    _, records = synthetic_run(replicates=1, failures=False)
    r = records[0]
    assert r.repro is not None
    left = ["pid 41 (loadgen --api-key abc123 --rate 5)", "pid 42 (sleep 1000)"]
    leaky = r.model_copy(update={"repro": r.repro.model_copy(update={"left_behind": left})})
    masked = mask_record(leaky, Redactor())
    assert masked.repro is not None
    assert masked.repro.left_behind == [f"pid 41 (loadgen --api-key {REDACTED} --rate 5)", "pid 42 (sleep 1000)"]
    shown = redacted_json(leaky, Redactor())
    assert "abc123" not in shown and f"--api-key {REDACTED} --rate 5" in shown


def test_a_trial_folders_raw_texts_are_rewritten_masked(tmp_path: Path) -> None:
    from orchestrator.store.redacted import redact_folder

    (tmp_path / "logs").mkdir()
    (tmp_path / "repro.out").write_text("Authorization: Bearer abcdefghijk\ncount 3\n")
    (tmp_path / "repro.err").write_text("nothing secret, --max-tokens 1800\n")
    (tmp_path / "logs" / "decode-u.log").write_bytes(b"--api-key abc \xff raw byte\n")
    (tmp_path / "telemetry.json").write_text('{"api_key": "abc"}')  # not a raw text orch masks on disk
    changed = redact_folder(tmp_path, Redactor().text)
    assert changed == [tmp_path / "logs" / "decode-u.log", tmp_path / "repro.out"]
    assert (tmp_path / "repro.out").read_text() == f"Authorization: Bearer {REDACTED}\ncount 3\n"
    # a byte that is not UTF-8 survives the rewrite as it was
    assert (tmp_path / "logs" / "decode-u.log").read_bytes() == b"--api-key " + REDACTED.encode() + b" \xff raw byte\n"
    assert (tmp_path / "repro.err").read_text() == "nothing secret, --max-tokens 1800\n"


def test_masked_json_stays_json() -> None:
    import json

    data = {"env": {"HF_TOKEN": "abc", "X": 'curl -H "Authorization: Bearer abcdefghij" --api-key "zz"'}, "n": 1}
    shown = json.loads(Redactor().text(json.dumps(data)))
    assert shown == {
        "env": {"HF_TOKEN": REDACTED, "X": f'curl -H "Authorization: Bearer {REDACTED}" --api-key "{REDACTED}"'},
        "n": 1,
    }
