"""A parallel run's page shows every testbed's hosts, bounded; a one-testbed page as before.

The provenance section listed `hosts` only, the first testbed's: a reader of a two-testbed run
could not see that testbed B ran other GPUs. Unit tier: `orch run` through the API on the fakes
(tests/helpers/parallel_fakes.py), and a manifest in memory for the cap."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from helpers.manifests import planned
from helpers.parallel_fakes import H100, H200, fake_matrix, fleet, run, write_files
from markupsafe import escape

from orchestrator.report.build import HOST_ROWS_SHOWN, build_report
from orchestrator.report.render import render_report
from orchestrator.store.manifest import load_manifest

MATRIX = fake_matrix("hosts", 1)
HOST_DT = re.compile(r"<dt>host ([^<]*)</dt><dd>([^<]*)</dd>")


def _host_rows(page: str) -> list[tuple[str, str]]:
    return [(label, html.unescape(facts)) for label, facts in HOST_DT.findall(page)]


def test_a_parallel_runs_page_shows_each_testbeds_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Testbed B's decode host ran H200s: its row says so, beside A's H100s, every role of both."""
    fleet(monkeypatch, A=H100, B=H200)
    m, i = write_files(tmp_path, MATRIX, ["A", "B"])
    outcome = run(tmp_path, m, i, ["A", "B"])
    rows = dict(_host_rows((outcome.run_dir / "index.html").read_text()))
    assert list(rows) == [
        "prefill on testbed A",
        "decode on testbed A",
        "prefill on testbed B",
        "decode on testbed B",
    ]
    assert "gpu_model=2 x NVIDIA H100 80GB HBM3" in rows["decode on testbed A"]
    assert "gpu_model=2 x NVIDIA H200, gpu_driver=560.35.03" in rows["decode on testbed B"]
    assert "address=B-decode.fake" in rows["decode on testbed B"]


def test_a_one_testbed_page_lists_its_hosts_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows `host ROLE` with the facts as run.json keeps them, in its order: no testbed named."""
    fleet(monkeypatch, A=H100)
    m, i = write_files(tmp_path, MATRIX, ["A"])
    outcome = run(tmp_path, m, i, ["A"])
    page = (outcome.run_dir / "index.html").read_text()
    hosts = load_manifest(outcome.run_dir, plan=False).hosts
    facts = {role: ", ".join(f"{escape(k)}={escape(v)}" for k, v in d.items()) for role, d in hosts.items()}
    expected = "".join(f"<dt>host {role}</dt><dd>{text}</dd>" for role, text in facts.items())
    assert f"</dd>\n{expected}  </dl>" in page  # the template trims blocks: the rows on one line
    assert "on testbed" not in page and "more hosts" not in page


def test_many_testbeds_hosts_are_cut_with_the_rest_counted() -> None:
    """30 testbeds x 3 roles: the first HOST_ROWS_SHOWN rows, then one line counting the others."""
    manifest = planned()[1]
    names = [f"tb{n:02d}" for n in range(30)]
    beds = {n: {r: {"address": f"{n}-{r}.fake", "gpu_model": "H100"} for r in ("a", "b", "c")} for n in names}
    manifest = manifest.model_copy(update={"testbeds": names, "testbed": ",".join(names), "testbed_hosts": beds})
    page = render_report(build_report(manifest, []))
    rows = _host_rows(page)
    assert len(rows) == HOST_ROWS_SHOWN < 90
    assert rows[0][0] == "a on testbed tb00" and rows[-1][0] == "a on testbed tb13"
    more = 90 - HOST_ROWS_SHOWN
    assert f"<dt>more hosts</dt><dd>+{more} more (testbed, role) not shown; run.json" in page
