"""`orch compare` reads every testbed's host facts and the resumes on other facts.

run.json keeps a parallel run's every testbed's facts (`testbed_hosts`) and the facts a resume
found otherwise than the first session (`hosts_changed`; core.hostfacts), but compare read only
`hosts`, the first testbed's as the first session found them: two runs whose second testbed ran
other GPUs, or a run resumed on another server version, compared as alike. Now each testbed is
compared against the other run's (by name where both ran on it, else across the testbeds each ran
on), one line per fact, and each resume on other facts is one line per run. One-testbed run.json
files (and older ones, without the fields) compare as before, byte for byte. Unit tier:
manifests in memory, as tests/unit/test_host_facts_kept.py builds the fields."""

from __future__ import annotations

import pytest
from helpers.manifests import planned

from orchestrator.core.records import HostsChanged, RunManifest
from orchestrator.report.unlike import lines_of, unlike

H100 = {"gpu_model": "2 x H100", "gpu_driver": "550", "cuda": "12.4"}
H200 = {**H100, "gpu_model": "2 x H200"}


@pytest.fixture(scope="module")
def base() -> RunManifest:
    """An ended run's (a running one has recorded no host fact yet: report.unlike says so once)."""
    return planned()[1].model_copy(update={"status": "completed"})


def with_host(m: RunManifest, role: str, **facts: str) -> RunManifest:
    hosts = {r: dict(h) for r, h in m.hosts.items()}
    hosts[role].update(facts)
    return m.model_copy(update={"hosts": hosts})


def on_testbeds(m: RunManifest, **beds: dict[str, str]) -> RunManifest:
    """A parallel run on these testbeds, each one's decode role with these facts (`hosts` is the
    first testbed's, as core.hostfacts.recorded_hosts writes it)."""
    kept = {name: {"decode": {"address": f"{name}.fake", **facts}} for name, facts in beds.items()}
    names = list(beds)
    first = kept[names[0]]
    return m.model_copy(update={"testbed": ",".join(names), "testbeds": names, "testbed_hosts": kept, "hosts": first})


def host_lines(a: RunManifest, b: RunManifest) -> list[str]:
    return [line for line in lines_of(unlike(a, b)) if "orch " not in line]


def test_one_testbed_runs_compare_byte_for_byte_as_before(base: RunManifest) -> None:
    """Written by the code before testbed_hosts and hosts_changed were read: the same lines, in the
    same order (role lines, then GPUs whole; the inventory line only where no role line says it)."""
    a = with_host(base, "decode", exec_start="python -m sglang --tp 2", server_version="0.4.1", server_info="tp 2")
    a = with_host(with_host(a, "decode", **H100), "prefill", gpu_model="2 x H100")
    b = with_host(base, "decode", exec_start="python -m sglang --tp 4", server_version="0.4.2", server_info="tp 4")
    b = with_host(with_host(b, "decode", **H200), "prefill", env_sha256_before="b" * 64)
    b = b.model_copy(update={"testbed": "other", "testbeds": ["other"]})
    assert "testbed_hosts" not in a.model_dump_json() and "hosts_changed" not in b.model_dump_json()
    assert host_lines(a, b) == [
        "A ran on testbed 'local-sim', B on 'other'",
        "the decode role's units' command line differed: 'python -m sglang --tp 2' in A, 'python -m sglang "
        "--tp 4' in B; its server info differed: 'tp 2' in A, 'tp 4' in B; its server version differed: "
        "'0.4.1' in A, '0.4.2' in B",
        f"the prefill role's env file as the run began (sha256) differed: not recorded in A, '{'b' * 64}' in B",
        "the decode role ran on GPUs '2 x H100, driver 550, CUDA 12.4' in A, on '2 x H200, driver 550, CUDA 12.4' in B",
        "the GPUs are known in one run only, so whether they differed is not known: the prefill role ran on "
        "'2 x H100, driver not available, CUDA not available' in A; in B run.json records none",
    ]
    c, d = with_host(base, "decode", **H100), with_host(base, "decode", **H200)
    d = d.model_copy(update={"inventory_sha256": "x", "inventory_text": base.inventory_text.replace(":", " :", 1)})
    assert host_lines(c, d)[1:] == [
        "the decode role ran on GPUs '2 x H100, driver 550, CUDA 12.4' in A, on '2 x H200, driver 550, CUDA 12.4' in B"
    ]
    assert host_lines(c, d)[0].startswith("the inventory file differs (first at line ")


def test_a_testbed_both_ran_on_is_compared_with_itself_fact_by_fact(base: RunManifest) -> None:
    """Testbed y ran H200s in B, H100s in A; x (the first, all `hosts` holds) alike: `hosts` alone
    said nothing. One line per fact; y's server info (the first cell it ran) is no difference."""
    a = on_testbeds(base, x=H100, y={**H100, "server_info": "tp 2"})
    b = on_testbeds(base, x=H100, y={**H200, "gpu_driver": "560", "server_info": "tp 4"})
    assert a.hosts == b.hosts
    assert host_lines(a, b) == [
        "B's testbeds were not copies: see its report",
        "testbed y's decode role's GPU driver differed: '550' in A, '560' in B",
        "testbed y's decode role's GPU model differed: '2 x H100' in A, '2 x H200' in B",
    ]
    assert host_lines(a, a) == []


def test_a_testbeds_facts_are_masked_as_the_report_masks_host_lines(base: RunManifest) -> None:
    """A token in testbed y's command line (another in each run): the line says the command line
    differed, never the token."""
    token = "hf_" + "a1B2c3D4e5F6g7H8i9J0"
    a = on_testbeds(base, x=H100, y={**H100, "exec_start": f"serve --token {token} --tp 2"})
    b = on_testbeds(base, x=H100, y={**H100, "exec_start": f"serve --token {token[::-1]} --tp 4"})
    (line,) = host_lines(a, b)
    assert line.startswith("testbed y's decode role's units' command line differed: ") and "--tp 4" in line
    assert token not in line and token[::-1] not in line and "a1B2" not in line


def test_testbeds_not_shared_are_named_and_compared_per_role_across_them(base: RunManifest) -> None:
    """A ran on x and y (H100), B on z alone (H200): which testbeds each ran on, then each fact as
    each run's testbeds had it; their addresses differ too (other hosts), said as any host fact."""
    a = on_testbeds(base, x=H100, y=H100)
    b = on_testbeds(base, z=H200)
    assert host_lines(a, b) == [
        "A ran on testbeds 'x', 'y', B on testbed 'z'",
        "the decode role's address differed: in A 'x.fake' on x and 'y.fake' on y; in B 'z.fake' on z",
        "the decode role's GPU model differed: in A '2 x H100' on x, y; in B '2 x H200' on z",
    ]


def test_a_one_testbed_run_against_a_parallel_one_compares_its_testbed_by_name(base: RunManifest) -> None:
    """B ran on x alone (no testbed_hosts: `hosts` is x's); A on x and y, y on H200: x against x
    says nothing, y (B did not run on it) against B's x says the GPU model."""
    a = on_testbeds(base, x=H100, y=H200)
    b = on_testbeds(base, x=H100).model_copy(update={"testbed_hosts": {}})
    assert host_lines(a, b) == [
        "A's testbeds were not copies: see its report",
        "A ran on testbeds 'x', 'y', B on testbed 'x'",
        "the decode role's address differed: 'y.fake' in A, 'x.fake' in B",
        "the decode role's GPU model differed: '2 x H200' in A, '2 x H100' in B",
    ]


def test_a_run_whose_testbeds_differ_is_said_once_not_per_fact(base: RunManifest) -> None:
    """A's y ran H200s and another server version than its x (its own report says both): one line
    for A, however many facts; each fact is then compared with B's y, a copy of x."""
    a = on_testbeds(base, x={**H100, "server_version": "0.4.1"}, y={**H200, "server_version": "0.4.2"})
    b = on_testbeds(base, x={**H100, "server_version": "0.4.1"}, y={**H100, "server_version": "0.4.1"})
    assert host_lines(a, b) == [
        "A's testbeds were not copies: see its report",
        "testbed y's decode role's GPU model differed: '2 x H200' in A, '2 x H100' in B",
        "testbed y's decode role's server version differed: '0.4.2' in A, '0.4.1' in B",
    ]


def test_a_resume_on_other_facts_is_one_line_per_run(base: RunManifest) -> None:
    """B was resumed twice on other facts: one line naming each change's facts, resume and trials;
    A, resumed on none, says nothing; the first sessions' facts alike, no host line."""
    changes = [
        HostsChanged(session=1, role="decode", facts={"gpu_model": "2 x H200", "cuda": "12.6"}, trials=3, since="T1"),
        HostsChanged(session=2, role="prefill", facts={"server_version": "0.4.2"}),
    ]
    b = base.model_copy(update={"hosts_changed": changes})
    assert host_lines(base, b) == [
        "B was resumed on other host facts: the decode role's GPU model, CUDA version in resume 1 (which ran 3 "
        "trials from T1); the prefill role's server version in resume 2 (which ran no trial): its cells mix "
        "trials from before and after the change (see its report)"
    ]
    parallel = on_testbeds(base, x=H100, y=H100)
    on_y = HostsChanged(session=1, testbed="y", role="decode", facts={"gpu_model": "2 x H200"}, trials=1, since="T2")
    said = host_lines(parallel.model_copy(update={"hosts_changed": [on_y]}), parallel)
    assert said == [
        "A was resumed on other host facts: testbed y's decode role's GPU model in resume 1 (which ran 1 trial "
        "from T2): its cells mix trials from before and after the change (see its report)"
    ]
