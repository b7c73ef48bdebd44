"""Values of secret-looking variables (TOKEN, KEY, SECRET, PASSWORD in the name) never appear in
the journal, the report or the output of a run, while the units still get them (the live
process is verified against the real value).
"""

from __future__ import annotations

import pytest

from .helpers import REPRO, SimBed, assert_clean, by_trial, matrix_yaml, run_cli

pytestmark = pytest.mark.sim

VALUES = ("tok-7f3a9c21-SHOULD-NOT-LEAK", "pw-0b1d-SHOULD-NOT-LEAK")
SECRETS = f"""\
  auth:
    levels:
      valid: {{decode: {{API_TOKEN: "{VALUES[0]}"}}}}
      other: {{decode: {{API_TOKEN: "{VALUES[1]}"}}}}
"""


def leaks(text: str) -> list[str]:
    return [v for v in VALUES if v in text]


def test_secret_values_are_redacted_in_journal_report_and_output(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1, extra_factor=SECRETS, extra="exclude:\n  - {cuda_graph: off}\n"))
    done = run_cli(bed.run_args("sec"), capsys)
    assert done.code == 0, done.output
    run_dir = bed.run_dir("sec")
    trials = by_trial(run_dir)
    assert len(trials) == 4 and all(t.status == "completed" for t in trials.values())
    # the live process got the real value: verification compared it (and passed)
    assert {t.env["decode"]["API_TOKEN"] for t in trials.values()} == {"••••"}

    assert not leaks(done.output), "secret in the run's output"
    assert not leaks((run_dir / "journal.jsonl").read_text()), "secret in journal.jsonl"
    assert not leaks((run_dir / "index.html").read_text()), "secret in the report"
    assert not leaks((bed.reports / "index.html").read_text()), "secret in the reports index"
    for path in (run_dir / "trials").rglob("*"):
        if path.is_file():
            assert not leaks(path.read_text(errors="replace")), f"secret in {path}"
    assert_clean(bed)


def test_secret_values_are_not_in_the_run_manifest(bed: SimBed) -> None:
    from orchestrator.core.config import read_inventory, read_matrix
    from orchestrator.core.plan import make_plan
    from orchestrator.store.planrecord import make_manifest

    bed.write_matrix(matrix_yaml(replicates=1, extra_factor=SECRETS))
    matrix, inventory = read_matrix(bed.matrix), read_inventory(bed.inventory)
    manifest = make_manifest(make_plan(matrix, inventory.testbed(None), 1, None), inventory, "sec", "now")
    assert not leaks(manifest.model_dump_json())


def test_secret_values_are_not_in_the_plan_output(bed: SimBed, capsys) -> None:
    bed.write_matrix(matrix_yaml(replicates=1, extra_factor=SECRETS))
    done = run_cli(["plan", str(bed.matrix), "-i", str(bed.inventory)], capsys)
    assert done.code == 0, done.output
    assert not leaks(done.output)


DECLARED_VALUE = "hub-auth-9c1e-SHOULD-NOT-LEAK"
DECLARED = f"""\
  hub:
    levels:
      a: {{decode: {{HF_HUB_AUTH: "{DECLARED_VALUE}"}}}}
      b: {{decode: {{HF_HUB_AUTH: "other-{DECLARED_VALUE}"}}}}
"""


def test_declared_secret_names_are_redacted_too(bed: SimBed, capsys) -> None:
    """HF_HUB_AUTH does not look secret by its name; the matrix says `secrets: [HF_HUB_AUTH]`."""
    bed.write_matrix(
        matrix_yaml(
            replicates=1, extra_factor=DECLARED, extra="exclude:\n  - {cuda_graph: off}\nsecrets: [HF_HUB_AUTH]\n"
        )
    )
    done = run_cli(bed.run_args("declared"), capsys)
    assert done.code == 0, done.output
    run_dir = bed.run_dir("declared")
    trials = by_trial(run_dir)
    assert {t.env["decode"]["HF_HUB_AUTH"] for t in trials.values()} == {"••••"}
    plan = run_cli(["plan", str(bed.matrix), "-i", str(bed.inventory)], capsys)
    for text in (
        done.output,
        plan.output,
        (run_dir / "journal.jsonl").read_text(),
        (run_dir / "index.html").read_text(),
        (run_dir / "run.json").read_text(),
    ):
        assert DECLARED_VALUE not in text
    rerendered = run_cli(["report", str(run_dir)], capsys)  # a later `orch report` keeps the mask
    assert rerendered.code == 0 and DECLARED_VALUE not in (run_dir / "index.html").read_text()
    assert_clean(bed)


# ----------------------------------------------------------------------------- issue 13: by value, every artifact
BEARER = "eyJhbGciOi-bearer-SHOULD-NOT-LEAK"
HF = "hf_ShouldNotLeak0123456789abcdef"
PASSWORD = "pw-in-url-SHOULD-NOT-LEAK"
PRINTED = (BEARER, HF, PASSWORD, VALUES[0])
NOISY = (
    REPRO + f" && echo \"curl -H 'Authorization: Bearer {BEARER}' https://bob:{PASSWORD}@example.invalid/v1\""
    f" && echo 'login {HF} token {VALUES[0]}' && echo 'flags --max-tokens 1800' && echo 'hf {HF}' >&2"
)


def test_what_a_repro_prints_is_masked_in_every_artifact_and_served_file(bed: SimBed, capsys) -> None:
    """A repro that prints a bearer header, an hf_ token, a URL password and the cell's own secret:
    none of them in the journal, run.json, plan.json, the report, the index, the export, the
    trial files or what `orch serve` hands out; `--max-tokens 1800` stays readable."""
    import httpx
    from helpers.serving import serving

    from orchestrator.report.export import export_run

    bed.write_matrix(
        matrix_yaml(replicates=1, extra_factor=SECRETS, command=NOISY, extra="exclude:\n  - {cuda_graph: off}\n")
    )
    done = run_cli(bed.run_args("noisy"), capsys)
    assert done.code == 0, done.output
    run_dir = bed.run_dir("noisy")
    trials = by_trial(run_dir)
    assert len(trials) == 4 and all(t.status == "completed" for t in trials.values())
    assert all("--max-tokens 1800" in (t.repro.stdout_tail if t.repro else "") for t in trials.values())
    exports = [export_run(run_dir, fmt) for fmt in ("csv", "json")]  # type: ignore[arg-type]
    files = [run_dir / n for n in ("journal.jsonl", "run.json", "plan.json", "index.html")]
    files += [bed.reports / "index.html", *exports, *(p for p in (run_dir / "trials").rglob("*") if p.is_file())]
    for path in files:
        found = [v for v in PRINTED if v in path.read_text(errors="replace")]
        assert not found, f"{found} in {path}"
    out = (run_dir / "trials" / "0000" / "repro.out").read_text()
    assert "--max-tokens 1800" in out and "Authorization: Bearer ••••" in out and "bob:••••@example.invalid" in out
    assert "hf ••••" in (run_dir / "trials" / "0000" / "repro.err").read_text()
    assert not [v for v in PRINTED if v in done.output]

    with serving(bed.reports) as url:
        base = f"{url}/noisy"
        with httpx.Client(trust_env=False, timeout=10) as http:
            for rel in ("trials/0000/repro.out", "trials/0000/repro.err", "journal.jsonl", "index.html"):
                answer = http.get(f"{base}/{rel}")
                assert answer.status_code == 200 and not [v for v in PRINTED if v in answer.text], rel
    assert_clean(bed)


def test_a_short_form_factor_on_a_secret_is_refused_before_any_host_is_touched(bed: SimBed, capsys) -> None:
    short = f'  tok:\n    env: {{decode: HF_TOKEN}}\n    levels: [null, "{VALUES[0]}"]\n'
    bed.write_matrix(matrix_yaml(replicates=1, extra_factor=short))
    done = run_cli(bed.run_args("short"), capsys)
    assert done.code == 2 and f"{bed.matrix}:" in done.output and "name the levels" in done.output
    assert not leaks(done.output) and not bed.run_dir("short").exists()
    assert_clean(bed)
