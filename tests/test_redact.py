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
from orchestrator.store.manifest import make_manifest

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
        f'HF_HUB_AUTH={REDACTED} AUTH: {REDACTED} MY_AUTH_MODE=on {{"HF_HUB_AUTH": {REDACTED}}} HF_TOKEN={REDACTED}'
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
    assert "value-a" not in manifest.model_dump_json() and f"HF_HUB_AUTH: {REDACTED}" in manifest.matrix_text
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
