"""The restore at a sweep's end, on real systemd + sshd hosts, when the env files were not left as
orch wrote them: decode's deleted during the last trial (its unit still running on a cell's env),
prefill's replaced by a symlink to another file (team.env, never backed up). Before: the restore
failed on decode for good ("cannot read ...: no such file or directory", and every `orch restore`
after it the same), and wrote prefill's original THROUGH the link into team.env.

Now decode gets its original back with the original's mode (600 here, set for the test) and its
unit restarted; prefill's link is set aside whole (still pointing at team.env, which nobody
touched) and the original written back as a regular file; the run says so and exits 0."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers.ssh_sweep import ENV_FILES, no_leftovers, snapshot, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main

pytestmark = pytest.mark.testbed

DECODE, PREFILL, TEAM = "/etc/sglang/decode.env", "/etc/sglang/prefill.env", "/etc/sglang/team.env"
FILES = {**ENV_FILES, "decode": DECODE}
# each collector runs on its host after every trial: the first call leaves a mark, the second (the
# last trial's) does the damage, so the restore that follows finds it
ONCE = "if [ -e MARK ]; then {damage}; else touch MARK; fi; echo 0"
MATRIX = """\
name: restore-drift
factors:
  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [on, off]
order: sequential
health_timeouts: {{prefill: 30, decode: 30, router: 30}}
repro:
  command: "echo 'CORRUPTION sessions: 0/8'"
  on: decode
  timeout: 30
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
collect:
  rm_decode: {{role: decode, command: "{rm}"}}
  link_prefill: {{role: prefill, command: "{link}"}}
"""


def stat(tb: Testbed, host: str, path: str) -> str:
    return tb.ssh(host, f"stat -c '%F %a %U' {path}", check=False).stdout.strip()


def test_a_deleted_env_file_and_one_replaced_by_a_symlink_are_restored(
    testbed: Testbed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(testbed, FILES)
    run_id = f"drift-{time.monotonic_ns()}"
    mark = f"/var/tmp/orch-{run_id}"
    rm = ONCE.format(damage=f"rm {DECODE}").replace("MARK", mark)
    link = ONCE.format(damage=f"printf 'TEAM=1\\\\n' > {TEAM} && ln -sf {TEAM} {PREFILL}").replace("MARK", mark)
    (tmp_path / "m.yaml").write_text(MATRIX.format(rm=rm, link=link))
    testbed.ssh("decode", f"chmod 600 {DECODE}")
    try:
        started = time.monotonic()
        args = ["run", str(tmp_path / "m.yaml"), "-i", str(testbed.inventory), "-t", "dsv4-pd", "--retries", "0"]
        args.append("--skip-preflight")  # 1.5-2 s; the testbed is as preflight wants it (other tests check)
        code = main([*args, "--out", str(tmp_path / "reports"), "--run-id", run_id])
        took = time.monotonic() - started
        out = capsys.readouterr()
        assert [t.status for t in trials_of(tmp_path / "reports" / run_id)] == ["completed"] * 2
        assert code == 0, out.err + out.out
        # decode: its original, with its original mode, and a unit restarted on it
        assert snapshot(testbed, FILES) == before
        assert stat(testbed, "decode", DECODE) == "regular file 600 root"
        assert "was missing" in out.err and DECODE in out.err
        pid = "$(systemctl show -p MainPID --value sglang-dsv4-decode)"
        live = testbed.ssh("decode", f"tr '\\0' '\\n' < /proc/{pid}/environ | grep ^SGLANG_OPT_USE").stdout
        assert live == "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\n"  # the last cell had 0
        # prefill: a regular file again; the link kept aside as it was; team.env untouched
        assert stat(testbed, "prefill", PREFILL) == "regular file 644 root"
        aside = f"{PREFILL}.orch-drift-{run_id}"
        assert testbed.ssh("prefill", f"readlink {aside}").stdout.strip() == TEAM
        assert testbed.ssh("prefill", f"cat {TEAM}").stdout == "TEAM=1\n"
        assert f"a symlink to {TEAM}" in out.err and aside in out.err
        assert f"kept aside: prefill ({aside})" in out.out
        with capsys.disabled():
            print(f"\n[ssh] a deleted and a symlinked env file restored: 2 trials and the restore in {took:.1f} s")
    finally:
        put_back(testbed, before, mark)
    no_leftovers(testbed)


def put_back(tb: Testbed, before: dict[str, str], mark: str) -> None:
    """Whatever the run left (a failed restore leaves decode.env missing, prefill.env a link):
    the original files, mode 644, units restarted on any other, no run files beside them."""
    for host, unit in (("decode", "sglang-dsv4-decode"), ("prefill", "sglang-dsv4-prefill")):
        path = FILES[host]
        now = tb.ssh(host, f"base64 -w0 {path}", check=False).stdout
        if now != before[host] or not stat(tb, host, path).startswith("regular file "):
            tb.ssh(host, f"rm -f {path} && echo {before[host]} | base64 -d > {path} && systemctl restart {unit}")
        tb.ssh(host, f"chmod 644 {path}")
        tb.ssh(host, f"rm -f {mark} {TEAM} {path}.orch-drift-* {path}.orch-backup-*", check=False)
