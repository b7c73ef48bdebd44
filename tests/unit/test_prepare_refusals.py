"""What sweep.prepare refuses before any host is touched, each at the line to fix (exit 2): a
--replicates override that plans too many trials, a command its placeholders make too long to run,
and which SSH files of an inventory mixing local and SSH hosts are missing here (the seventh
mutation round: none of these had a test among the module's own files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.core.bounds import MAX_COMMAND_BYTES
from orchestrator.errors import ConfigError
from orchestrator.store.rundir import RunDir
from orchestrator.sweep import api
from orchestrator.sweep.prepare import check_command_lengths, missing_key_files

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "inventory/local.yaml"

MATRIX = """\
name: long
factors:
  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [{levels}]
repro:
  command: "echo {{router_url}}{command}"
{warmup}  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\\\d+)/(?P<n>\\\\d+)'}}
{collect}"""
LONG = " {run_dir}" * 1500  # under 16 KiB as written, over 64 KiB once the run folder is filled in


def _matrix(tmp_path: Path, levels: int = 2, command: str = "", warmup: str = "", collect: str = "") -> Path:
    text = MATRIX.format(
        levels=", ".join(str(i) for i in range(levels)),
        command=command,
        warmup=f"  warmup: 'echo{warmup}'\n" if warmup else "",
        collect=f"collect:\n  c:\n    role: decode\n    command: 'echo{collect}'\n" if collect else "",
    )
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_a_replicates_override_over_the_trial_limit_is_refused_at_prepare(tmp_path: Path) -> None:
    """20 cells x 100,000 replicates is 2,000,000 trials: --replicates is named, nothing planned."""
    request = api.SweepRequest(_matrix(tmp_path, levels=20), LOCAL, replicates=100_000)
    with pytest.raises(ConfigError, match=r"--replicates: 100000: up to 20 cells x 100,000 replicates") as err:
        api.prepare(request)
    assert err.value.exit_code == 2


@pytest.mark.parametrize(
    ("where", "kwargs"),
    [("command:", {"command": LONG}), ("warmup:", {"warmup": LONG}), ("command: 'echo", {"collect": LONG})],
    ids=["repro.command", "repro.warmup", "collect.c.command"],
)
def test_a_command_too_long_once_filled_in_is_refused_at_its_line(
    tmp_path: Path, where: str, kwargs: dict[str, str]
) -> None:
    matrix = _matrix(tmp_path, **kwargs)
    prepared = api.prepare(api.SweepRequest(matrix, LOCAL))
    with pytest.raises(ConfigError, match="bytes once its placeholders are filled in") as err:
        check_command_lengths(prepared.plan, prepared.testbeds, RunDir(tmp_path / "reports" / "r"))
    assert err.value.line == _line(matrix, where) and err.value.file is not None
    assert int(str(err.value).split("the command is ")[1].split(" bytes")[0].replace(",", "")) > MAX_COMMAND_BYTES


def test_short_commands_pass_the_length_check(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, command=" {run_dir}", warmup=" {run_dir}", collect=" {trial_dir}")
    prepared = api.prepare(api.SweepRequest(matrix, LOCAL))
    check_command_lengths(prepared.plan, prepared.testbeds, RunDir(tmp_path / "reports" / "r"))


def _mixed_inventory(tmp_path: Path, ssh_hosts: int) -> Path:
    """A local prefill (no SSH files) beside a decode of `ssh_hosts` instances sharing one missing key."""
    instances = "".join(f"          - {{ssh: {{host: 10.0.0.{n + 2}}}}}\n" for n in range(ssh_hosts))
    path = tmp_path / "inv.yaml"
    path.write_text(
        "testbeds:\n  pd:\n    hosts:\n      prefill:\n        transport: local\n"
        "        env_file: prefill.env\n        units: [{name: p, command: [sleep, '1']}]\n"
        "      decode:\n        transport: ssh\n        env_file: /etc/sglang/decode.env\n"
        "        units: [sglang-decode]\n        instances:\n" + instances + "        ssh:\n"
        f"          user: sglang\n          key: {tmp_path / 'id_gone'}\n"
    )
    return path


@pytest.mark.parametrize(("ssh_hosts", "phrase"), [(1, ")"), (2, " and 1 more host)"), (3, " and 2 more hosts)")])
def test_a_missing_key_beside_a_local_host_is_said_once_with_the_hosts_it_reaches(
    tmp_path: Path, ssh_hosts: int, phrase: str
) -> None:
    path = _mixed_inventory(tmp_path, ssh_hosts)
    inventory = api.load(_matrix(tmp_path), path)[1]
    missing = missing_key_files(list(inventory.testbeds.values()), inventory)
    assert len(missing) == 1, missing
    assert missing[0].line == _line(path, "key:") and missing[0].exit_code == 2
    assert str(missing[0]).split(" (check")[0].endswith(f"not found on this machine (decode.0 (10.0.0.2:22){phrase}")


def test_a_missing_repro_program_is_refused_in_a_plan_of_one_trial(tmp_path: Path) -> None:
    """One cell (the other level excluded) and one replicate: the plan's only trial is the one
    filled in to find the program (orch run --dry-run refuses it, as the run would)."""
    matrix = _matrix(tmp_path, command=" --x")
    matrix.write_text(
        matrix.read_text().replace('"echo {router_url}', '"/no/such/repro {router_url}')
        + "exclude:\n  - {overlap: 1}\nreplicates: 1\n"
    )
    prepared = api.prepare(api.SweepRequest(matrix, LOCAL))
    assert len(prepared.plan.steps) == 1
    with pytest.raises(ConfigError, match="/no/such/repro: no such program on this machine") as err:
        api.check_new_run(api.SweepRequest(matrix, LOCAL, reports_dir=tmp_path / "reports"), prepared)
    assert err.value.line == _line(matrix, "command:") and err.value.exit_code == 2
