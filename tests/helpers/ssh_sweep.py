"""A sweep over SSH on the real systemd + sshd testbed (tests/remote): the matrix, the env files
it edits, and checks that the hosts were left as found."""

from __future__ import annotations

from pathlib import Path

from testbed.fixture import Testbed

from orchestrator.core.records import TrialRecord
from orchestrator.store.journal import read_journal

MATRIX = """\
name: ssh-sweep
factors:
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
order: sequential
health_timeouts: {prefill: 30, decode: 30, router: 30}
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 8 --rounds 2 --seed {trial_seed}"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
collect:
  anomalies: {role: decode, pattern: ANOMALY}
  sglang_lines: {role: decode, command: "grep -c ^SGLANG /etc/sglang/decode.env || true"}
"""

# The one-factor matrix the repro tests on the testbed share (overlap on decode, on then off):
# each brings its own name, repro lines (command, where it runs, timeout) and any line before them.
_OVERLAP_MATRIX = """\
name: NAME
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
order: sequential
health_timeouts: {prefill: 30, decode: 30, router: 30}
BEFORErepro:
REPRO  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""


def ssh_overlap_matrix(name: str, repro: str, before_repro: str = "") -> str:
    """_OVERLAP_MATRIX named `name`; `repro` is the repro: block's lines before its metrics
    (indented, each ending in a newline), `before_repro` whole top-level lines."""
    return _OVERLAP_MATRIX.replace("NAME", name).replace("BEFORE", before_repro).replace("REPRO", repro)


ENV_FILES = {"prefill": "/etc/sglang/prefill.env", "router": "/etc/sglang/router.env"}


def snapshot(tb: Testbed, files: dict[str, str]) -> dict[str, str]:
    return {h: tb.ssh(h, f"base64 -w0 {path}").stdout for h, path in files.items()}


def trials_of(run_dir: Path) -> list[TrialRecord]:
    """Each trial's final record (a failed attempt that was tried again is journaled too, with
    `retried`: attempts_of has those)."""
    return [r for r in attempts_of(run_dir) if not r.retried]


def attempts_of(run_dir: Path) -> list[TrialRecord]:
    return [r for r in read_journal(run_dir / "journal.jsonl").records if isinstance(r, TrialRecord)]


def no_leftovers(tb: Testbed) -> None:
    for host in ("prefill", "decode", "router"):
        left = tb.ssh(host, "ls /etc/sglang").stdout.split()
        assert not [f for f in left if "orch-" in f], (host, left)
