"""hunt.html says what its verdicts rest on, and the drop check is the rule the README states. An
audited hunt showed the set without overlap ({bf16_index_k, cuda_graph} alone) at 1/40
"undecided" beside "every single-flag drop checked" (README: it must have run two trials
"without failing"), the clean configuration "passes" at 1/60 with no rule given, and
"bf16_index_k changes nothing unless cuda_graph and overlap are on" as a fact, though no trial
ran bf16_index_k with both others off (the sentence is the model's inference from the answer)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from helpers.hunt_runs import hunt_trial, small_hunt

from orchestrator.core.model import Matrix
from orchestrator.report.hunt import HuntReport, build_report, render, summary_lines

INFERRED = "(the model's inference from the answer, not tested in every configuration)"


def _audited(m: Matrix, more: int = 3) -> HuntReport:
    """The audited DSV4 AND hunt: its clean configuration saw 1 failure in 60 sessions, and the set
    without overlap 1 in 40 (2 trials: undecided), then `more` clean trials of that set."""
    assert m.hunt is not None
    flags = m.hunt.flags

    def on(*names: str) -> int:
        return sum(1 << flags.index(f) for f in names)

    b, c, o, t = flags
    plan = [(on(b, c, o, t), 5), (on(b, c, o, t), 4), (0, 1), (0, 0), (0, 0)]
    for dropped in (b, c, o):
        plan += [(on(*[f for f in flags if f != dropped]), 0)] * 4
    plan += [(on(b, c, o), 4), (on(c, o), 0), (on(c, o), 0), (on(b, o), 0), (on(b, o), 0)]
    plan += [(on(b, c), 1), (on(b, c), 0), (on(b, c, o), 3), (on(b, c, o), 2)] + [(on(b, c), 0)] * more
    records = [hunt_trial(dict(m.hunt.levels(config)), index, k) for index, (config, k) in enumerate(plan)]
    return build_report(m, records)


def _text(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_a_drop_whose_rest_failed_once_in_its_two_trials_is_not_checked_until_it_passes(tmp_path: Path) -> None:
    m = small_hunt(tmp_path)
    report = _audited(m, more=0)
    assert report.result.state == "running" and report.result.unchecked == ("overlap",), report.result.reason
    page = _text(render(report))
    assert (
        "overlap: the failing configuration without it: 0/80 sessions failed in 4 trials (passes); bf16_index_k and "
        "cuda_graph alone, every other flag clean: 1/40 sessions failed in 2 trials (undecided) - not checked yet"
    ) in page, page
    assert "every single-flag drop checked" not in page
    found = _audited(m)  # three more clean trials of the set: it passes on its own trials
    assert found.found and found.result.unchecked == (), found.result.reason
    alone = "bf16_index_k and cuda_graph alone, every other flag clean: 1/100 sessions failed in 5 trials"
    assert f"{alone} (passes) - checked" in _text(render(found))


def test_each_drop_check_is_shown_with_what_it_ran_and_the_rule_that_calls_it_checked(tmp_path: Path) -> None:
    page = _text(render(_audited(small_hunt(tmp_path))))
    assert (
        "cuda_graph: the failing configuration without it: 0/80 sessions failed in 4 trials (passes); bf16_index_k and "
        "overlap alone, every other flag clean: 0/40 sessions failed in 2 trials (undecided) - checked"
    ) in page, page
    assert "ran 2 trials without a failure or, once it showed one, passed on its own trials" in page


def test_the_clean_configurations_pass_is_explained_by_its_rule_and_number(tmp_path: Path) -> None:
    page = _text(render(_audited(small_hunt(tmp_path))))
    assert "passes once that chance at the affected rate is at most 0.05 (1 - the posterior target)" in page
    clean = re.search(r"the clean configuration: 1/60 sessions failed; the chance that it is affected at ~([0-9.]+)% "
                      r"is ([0-9.e-]+) <= 0.05: passes", page)  # fmt: skip
    assert clean and float(clean[2]) <= 0.05, page


def test_dependencies_are_said_as_the_models_inference(tmp_path: Path) -> None:
    report = _audited(small_hunt(tmp_path))
    said = [line.strip() for line in summary_lines(report)] + [_text(render(report))]
    claims = [line for line in said[:-1] if "changes nothing unless" in line]
    assert len(claims) == 3 and all(line.endswith(INFERRED) for line in claims), claims
    bare = re.findall(r"changes nothing unless [a-z_, ]+ are on(?! \(the model's inference)", said[-1])
    assert not bare and said[-1].count(INFERRED) == 3, bare
