"""`orch compare` as a new user's walk of README's "### Reports" found it on real runs of the bundled
simulator: the incomplete-run warning without the command to paste, a refusal (a hunt against a
sweep) listing every host fact in one line of ~3,000 characters, and a running run whose every
unrecorded host fact read as a difference."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.manifests import planned
from helpers.report_synth import fewer_factors, synthetic_run, write_run

from orchestrator.core.records import RunManifest
from orchestrator.errors import UsageError
from orchestrator.report.compare import write_comparison_page
from orchestrator.report.unlike import unlike


def test_compare_of_an_incomplete_run_gives_the_resume_command_to_paste(tmp_path: Path) -> None:
    """It said 'resume it (orch resume)', without the run's folder."""
    a_manifest, a_records = synthetic_run(failures=False, replicates=4)
    b_manifest, b_records = synthetic_run(
        failures=False, replicates=4, run_id="20260509-090000-stopped", status="interrupted"
    )
    run_a = write_run(tmp_path / "reports" / a_manifest.run_id, a_manifest, a_records)
    run_b = write_run(tmp_path / "reports" / b_manifest.run_id, b_manifest, b_records[:11])
    page = write_comparison_page(run_a, run_b, tmp_path / "c.html")
    (line,) = [w for w in page.warnings if "is incomplete" in w]
    assert f"; resume it (orch resume {run_b}) before trusting this comparison." in line, line


def test_a_refused_compare_names_a_few_differences_and_counts_the_rest(tmp_path: Path) -> None:
    """Runs with no cell in common (a hunt against a sweep) and other host facts: the refusal
    listed every fact, one line of ~3,000 characters."""
    a_manifest, a_records = synthetic_run()
    b_manifest, b_records = fewer_factors(*synthetic_run(run_id="20260509-090000-other"), keep=("overlap",))
    facts = {f"fact_{i}": "x" * 80 for i in range(12)}
    b_manifest = b_manifest.model_copy(
        update={
            "hosts": {role: {**h, **facts} for role, h in b_manifest.hosts.items()},
            "testbed": "elsewhere",
            "orch_version": "0.2.0",
        }
    )
    run_a = write_run(tmp_path / a_manifest.run_id, a_manifest, a_records)
    run_b = write_run(tmp_path / b_manifest.run_id, b_manifest, b_records)
    with pytest.raises(UsageError) as info:
        write_comparison_page(run_a, run_b, tmp_path / "c.html")
    text = str(info.value)
    assert text.startswith(f"{run_a} and {run_b}: nothing to compare: the runs have no cell in common"), text
    assert "; A ran on testbed 'local', B on 'elsewhere'; the decode role's " in text
    assert "; the prefill role's fact_0 differed: " in text and "fact_2" not in text  # each line cut
    assert text.endswith("…; and 1 more difference (compare two runs of one matrix, e.g. tonight's and last night's)")
    assert len(text) - len(f"{run_a} and {run_b}") < 800, len(text)  # the orch version is the 1 more


def with_facts(m: RunManifest, status: str, **facts: str) -> RunManifest:
    hosts = {role: {**h, **facts} for role, h in m.hosts.items()}
    return m.model_copy(update={"hosts": hosts, "status": status})


def test_a_running_run_s_unrecorded_host_facts_are_said_once_not_per_fact() -> None:
    """Run.json gets a session's host facts at its end: a running B said "differed: X in A, not
    recorded in B" for every fact of every role."""
    base = planned()[1]
    a = with_facts(base, "completed", server_version="0.5.4", exec_start="/usr/bin/server", address="10.0.0.1")
    b = with_facts(base, "running", address="10.0.0.2")
    context = unlike(a, b).context
    assert not [line for line in context if "not recorded in B" in line], context
    said = (
        "B is still running (or its controller died): its host facts are not recorded yet (run.json gets them "
        "at its end), so whether they differ from the other run's is not known"
    )
    assert context.count(said) == 1
    assert any("address differed: '10.0.0.1' in A, '10.0.0.2' in B" in line for line in context), context
    swapped = unlike(b, a).context
    assert sum(line.startswith("A is still running") for line in swapped) == 1
    ended = unlike(a, with_facts(base, "interrupted", address="10.0.0.2")).context  # ended: its facts are known
    assert any("not recorded in B" in line for line in ended) and not any("still running" in x for x in ended)


def with_beds(m: RunManifest, status: str, beds: dict[str, dict[str, str]]) -> RunManifest:
    """A parallel run: testbed -> the facts every role of it recorded."""
    kept = {tb: {role: {**h, **facts} for role, h in m.hosts.items()} for tb, facts in beds.items()}
    return m.model_copy(update={"testbeds": list(beds), "testbed_hosts": kept, "status": status})


def test_a_running_parallel_run_s_unrecorded_host_facts_are_said_once_not_per_fact() -> None:
    """The one-testbed rule, for a run on several testbeds (the helper that wrote it left this path):
    B's testbeds recorded only their addresses so far."""
    base = planned()[1]
    done = {"server_version": "0.5.4", "exec_start": "/usr/bin/server"}
    a = with_beds(base, "completed", {"t1": {**done, "address": "10.0.0.1"}, "t2": {**done, "address": "10.0.0.3"}})
    b = with_beds(base, "running", {"t1": {"address": "10.0.0.2"}, "t2": {"address": "10.0.0.4"}})
    context = unlike(a, b).context
    assert not [line for line in context if "not recorded in" in line or "not recorded on" in line], context
    said = [line for line in context if line.startswith("B is still running (or its controller died)")]
    assert len(said) == 1, context
    assert any("address differed" in line for line in context), context  # facts both recorded: compared
    ended = unlike(a, b.model_copy(update={"status": "interrupted"})).context
    assert not any("still running" in line for line in ended), ended
