"""`orch run` over real SSH against real systemd hosts: the whole sweep, end to end.

Env edits through SFTP, restarts through systemctl, health waits over the bridge, verification
from /proc/PID/environ, the repro on the controller, journal and restore (env files
byte-identical afterwards) - on the systemd dialect, on the shell dialect behind a wrapper, and
the classic mistake: `export` lines in an EnvironmentFile= file, caught by verification.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml
from helpers.ssh_sweep import ENV_FILES, MATRIX, no_leftovers, snapshot, trials_of
from testbed.fixture import Testbed

from orchestrator.cli.main import main
from orchestrator.sweep.prepare import shown_path

pytestmark = pytest.mark.testbed


def live_env(tb: Testbed, host: str, unit: str) -> dict[str, str]:
    pid = tb.ssh(host, f"systemctl show -p MainPID --value {unit}").stdout.strip()
    raw = tb.ssh(host, f"cat /proc/{pid}/environ | base64 -w0").stdout
    import base64

    pairs = [p.split("=", 1) for p in base64.b64decode(raw).decode().split("\0") if "=" in p]
    return dict(pairs)


def sweep(tb: Testbed, tmp_path: Path, testbed_name: str, *extra: str) -> tuple[int, Path]:
    (tmp_path / "m.yaml").write_text(MATRIX)
    run_id = f"ssh-{testbed_name}-{time.monotonic_ns()}"
    code = main(
        [
            "run",
            str(tmp_path / "m.yaml"),
            "-i",
            str(tb.inventory),
            "-t",
            testbed_name,
            "--out",
            str(tmp_path / "reports"),
            "--run-id",
            run_id,
            *extra,
        ]
    )
    return code, tmp_path / "reports" / run_id


@pytest.mark.parametrize(
    "testbed_name,decode_unit,decode_env",
    [
        ("dsv4-pd", "sglang-dsv4-decode", "/etc/sglang/decode.env"),
        ("dsv4-pd-shell", "sglang-dsv4-decode-shell", "/etc/sglang/decode-shell.env"),
    ],
)
def test_sweep_over_ssh_end_to_end(testbed: Testbed, tmp_path: Path, capsys, testbed_name, decode_unit, decode_env):
    files = {**ENV_FILES, "decode": decode_env}
    before = snapshot(testbed, files)
    t0 = time.monotonic()
    code, run_dir = sweep(testbed, tmp_path, testbed_name)
    out = capsys.readouterr()
    assert code == 0, out.err
    trials = trials_of(run_dir)
    assert [t.status for t in trials] == ["completed"] * 4, [t.failure for t in trials]
    with capsys.disabled():
        print(
            f"\nSSH sweep on {testbed_name}: {len(trials)} trials in {time.monotonic() - t0:.1f} s; "
            + "; ".join(
                f"{t.cell} -> corruption {t.metrics['corruption'].k}/{t.metrics['corruption'].n}" for t in trials
            )
        )
    # decode-only factors: only decode restarts (prefill and router stay up), waits cover the router
    assert {u for t in trials for u in t.restarted} == {f"decode:{decode_unit}"}
    assert all(set(t.health_wait_s) == {"prefill", "decode", "router"} for t in trials)
    assert all(t.metrics["sglang_lines"].value == 3 for t in trials)  # a command collector over SSH
    assert all(t.metrics["anomalies"].value > 0 for t in trials)
    assert all(Path(run_dir / p).read_text() for t in trials for p in t.logs.values())
    # restored: byte-identical files, and the live process runs with the original values again
    assert snapshot(testbed, files) == before
    no_leftovers(testbed)
    env = live_env(testbed, "decode", decode_unit)
    assert env.get("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP") == "1" and env.get("SGLANG_EXTRA_ARGS") == ""
    assert (run_dir / "index.html").exists()
    manifest = yaml.safe_load((run_dir / "run.json").read_text())  # JSON is YAML
    assert "orchestrator.sim.server" in manifest["hosts"]["decode"]["exec_start"]  # systemd's ExecStart argv
    assert '"version": "sim-0.1"' in manifest["hosts"]["decode"]["server_info"]
    # provenance over SSH: no nvidia-smi on the hosts, every trial says what served it (systemd's ExecStart)
    assert manifest["hosts"]["decode"]["gpu_model"] == "not available"
    assert all(set(t.provenance) == {"prefill", "decode", "router"} for t in trials)
    first = {t.provenance["decode"].exec_start for t in trials} - {""}
    assert len(first) == 1 and "orchestrator.sim.server" in first.pop()  # told once, then its digest
    assert sum(g["count"] for g in manifest["served"]) == 4 * 3


def test_systemd_dialect_edit_next_to_an_ignored_export_line_still_takes_effect(
    testbed: Testbed, tmp_path: Path, capsys
):
    """In the systemd dialect an `export K=v` line is not an assignment (systemd drops it), so orch
    appends a plain `K=v` that systemd reads: the sweep works and verification agrees."""
    path = "/etc/sglang/decode.env"
    original = testbed.ssh("decode", f"base64 -w0 {path}").stdout
    testbed.ssh(
        "decode",
        f"sed -i 's/^SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=/export SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=/' {path}",
    )
    exported = testbed.ssh("decode", f"base64 -w0 {path}").stdout
    try:
        code, run_dir = sweep(testbed, tmp_path, "dsv4-pd", "--retries", "0")
        assert code == 0, capsys.readouterr().err
        assert all(t.status == "completed" for t in trials_of(run_dir))
        assert testbed.ssh("decode", f"base64 -w0 {path}").stdout == exported  # restored as it was
    finally:
        testbed.ssh("decode", f"echo {original} | base64 -d > {path} && systemctl restart sglang-dsv4-decode")


def test_export_lines_in_an_environment_file_are_caught(testbed: Testbed, tmp_path: Path, capsys):
    """The real trap: a team writes `export` lines and declares the shell dialect, but the unit
    reads the file with EnvironmentFile=, which ignores them. Every edit silently does nothing;
    verification from /proc/PID/environ must catch it."""
    path = "/etc/sglang/decode.env"
    original = testbed.ssh("decode", f"base64 -w0 {path}").stdout
    testbed.ssh("decode", f"sed -i 's/^SGLANG_/export SGLANG_/' {path}")
    exported = testbed.ssh("decode", f"base64 -w0 {path}").stdout
    inventory = bad_inventory(testbed, tmp_path, "decode", dialect="shell")
    (tmp_path / "m.yaml").write_text(MATRIX)
    try:
        code = main(
            [
                "run",
                str(tmp_path / "m.yaml"),
                "-i",
                str(inventory),
                "--out",
                str(tmp_path / "reports"),
                "--run-id",
                "export-trap",
                "--retries",
                "0",
            ]
        )
        err = capsys.readouterr().err
        assert code == 1, err
        failed = [t for t in trials_of(tmp_path / "reports" / "export-trap") if t.status == "failed"]
        assert failed, "the ignored export lines went unnoticed"
        assert failed[0].failure.error == "VerificationError"
        message = failed[0].failure.message
        assert message.startswith("decode (") and "unit sglang-dsv4-decode:" in message
        assert "in the live process, expected" in message
        assert "systemd ignores `export NAME=value` lines" in message
        assert testbed.ssh("decode", f"base64 -w0 {path}").stdout == exported  # restored as it was
    finally:
        testbed.ssh("decode", f"echo {original} | base64 -d > {path} && systemctl restart sglang-dsv4-decode")


def bad_inventory(tb: Testbed, tmp_path: Path, host: str, **changes) -> Path:
    data = yaml.safe_load(tb.inventory.read_text())
    entry = data["testbeds"]["dsv4-pd"]["hosts"][host]
    for key, value in changes.items():
        if key.startswith("ssh_"):
            entry["ssh"][key[4:]] = value
        else:
            entry[key] = value
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def declared_at(text: str, testbed: str, role: str) -> int:
    """The line of `role:` in `testbed:` of an inventory's text (its first key of that name there)."""
    lines = text.splitlines()
    start = lines.index(f"  {testbed}:")
    return next(i for i, line in enumerate(lines, 1) if i > start + 1 and line.strip() == f"{role}:")


def ssh_line_at(text: str, testbed: str, role: str, key: str) -> int:
    """The line of `key:` in the `ssh:` block of `role` in `testbed` (yaml.safe_dump's text: one
    `ssh:` block per role, the first after the role's own line)."""
    lines = text.splitlines()
    start = declared_at(text, testbed, role)
    ssh = next(i for i, line in enumerate(lines, 1) if i > start and line.strip() == "ssh:")
    return next(i for i, line in enumerate(lines, 1) if i > ssh and line.strip().startswith(f"{key}:"))


def key_line_at(text: str, testbed: str, role: str, key: str) -> int:
    """The line of the role's own `key:` (yaml.safe_dump's text: the first such line after the role's)."""
    lines = text.splitlines()
    start = declared_at(text, testbed, role)
    return next(i for i, line in enumerate(lines, 1) if i > start and line.strip().startswith(f"{key}:"))


def make_key(tmp_path: Path) -> str:
    key = tmp_path / "wrong_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
        check=True,
        env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    return str(key)


def empty_known_hosts(tmp_path: Path) -> str:
    (tmp_path / "known_hosts").write_text("")
    return str(tmp_path / "known_hosts")


# each preflight problem is said at the line to fix: a failed connect at the `ssh:` address, or the key
# of a refused login (errors.ConnectError); an env file missing or not writable at `env_file:`, an
# unknown unit at `units:` (errors.PreflightError.about; walk10 found them at the role's line)
POINTS_AT = {
    "unreachable host": ("ssh", "host"),
    "wrong key": ("ssh", "key"),
    "unknown host key": ("ssh", "host"),
    "env file missing": ("", "env_file"),
    "unit not found": ("", "units"),
    "permission denied": ("", "env_file"),
    "sudo asks a password": ("ssh", "sudo"),
    "sudo wants a tty": ("ssh", "sudo"),
    "immutable file": ("", "env_file"),
    "append-only file": ("", "env_file"),
    "read-only file": ("", "env_file"),
    "read-only folder": ("", "env_file"),
    "masked unit": ("", "units"),
    "env file the unit does not read": ("", "env_file"),
    "shell runs no command": ("ssh", "host"),
}
PREFLIGHT = [
    ("unreachable host", lambda tb, p: dict(ssh_host=f"{tb.net}.250", ssh_connect_timeout=1), "cannot connect"),
    ("wrong key", lambda tb, p: dict(ssh_key=make_key(p)), "authentication failed for root"),
    ("unknown host key", lambda tb, p: dict(ssh_known_hosts=empty_known_hosts(p)), "host key not in known_hosts"),
    (
        "env file missing",
        lambda tb, p: dict(env_file="/etc/sglang/nope.env"),
        "env file /etc/sglang/nope.env does not exist",
    ),
    ("unit not found", lambda tb, p: dict(units=["sglang-nope"]), "unit sglang-nope not found"),
    ("permission denied", lambda tb, p: dict(ssh_user="orchuser"), "/etc/sglang/decode.env"),
    (
        "sudo asks a password",
        lambda tb, p: dict(ssh_user="orchuser", ssh_sudo=True),
        "sudo -n refused: a password is required (orch runs commands through `sudo -n`",
    ),
    (
        "sudo wants a tty",
        lambda tb, p: dict(ssh_user="orchuser", ssh_sudo=True),
        "sudo -n refused: sorry, you must have a tty to run sudo (orch runs",
    ),
]
# what each sudo case's host holds in /etc/sudoers.d/orchuser (removed after the test)
SUDOERS = {
    "sudo asks a password": "orchuser ALL=(ALL) ALL",
    "sudo wants a tty": "Defaults:orchuser requiretty\norchuser ALL=(ALL) NOPASSWD: ALL",
}


@pytest.mark.parametrize("name,change,expected", PREFLIGHT, ids=[c[0] for c in PREFLIGHT])
def test_preflight_failures_exit_2_naming_the_host_and_touch_nothing(
    testbed: Testbed, tmp_path, capsys, name, change, expected
):
    if name == "permission denied" or name in SUDOERS:  # a real unprivileged account; the env file is root's, 644
        testbed.ssh("decode", "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser")
    if name in SUDOERS:
        testbed.ssh(
            "decode",
            f"printf '{SUDOERS[name]}\\n' > /etc/sudoers.d/orchuser && chmod 440 /etc/sudoers.d/orchuser",
        )
    try:
        _refused_at_preflight(testbed, tmp_path, capsys, name, change, expected)
    finally:
        testbed.ssh("decode", "rm -f /etc/sudoers.d/orchuser")


def _refused_at_preflight(testbed: Testbed, tmp_path, capsys, name, change, expected) -> None:  # noqa: ANN001
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    inventory = bad_inventory(testbed, tmp_path, "decode", **change(testbed, tmp_path))
    (tmp_path / "m.yaml").write_text(MATRIX)
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inventory), "--out", str(tmp_path / "reports")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    text = inventory.read_text()
    block, key = POINTS_AT[name]
    line = ssh_line_at(text, "dsv4-pd", "decode", key) if block else key_line_at(text, "dsv4-pd", "decode", key)
    assert line > declared_at(text, "dsv4-pd", "decode")
    where = f"{shown_path(inventory)}:{line}"
    assert len(lines) == 1 and lines[0].startswith(f"error: {where}: decode ("), err
    assert expected in lines[0] and "nothing was changed" in lines[0], lines[0]
    assert snapshot(testbed, files) == before
    assert not (tmp_path / "reports").exists()
    no_leftovers(testbed)


# a host's env file orch (root) cannot replace, each made so on the host and put back after:
# (setup, undo, what the refusal says). The old `test -w` called the first, third and fourth
# "permission denied; set ssh.sudo: true" for root, and passed the append-only file: the sweep then
# stopped after 3 trials failed to write it (exit 1)
D = "/etc/sglang/decode.env"
UNWRITABLE = {
    "immutable file": (f"chattr +i {D}", f"chattr -i {D}", f"env file {D} is not writable (immutable or append-only"),
    "append-only file": (f"chattr +a {D}", f"chattr -a {D}", f"env file {D} is not writable (immutable or append-only"),
    "read-only file": (
        f"mount --bind {D} {D} && mount -o remount,ro,bind {D}",
        f"umount {D}",
        f"env file {D} is not writable (on a read-only mount)",
    ),
    "read-only folder": (
        "mount --bind /etc/sglang /etc/sglang && mount -o remount,ro,bind /etc/sglang",
        "umount /etc/sglang",
        f"env file {D} is not writable (on a read-only mount)",  # the file is on that mount too
    ),
}


@pytest.mark.parametrize("name", list(UNWRITABLE))
def test_an_env_file_root_cannot_replace_is_refused_naming_the_cause(testbed: Testbed, tmp_path, capsys, name):
    setup, undo, expected = UNWRITABLE[name]
    testbed.ssh("decode", setup)
    try:
        _refused_at_preflight(testbed, tmp_path, capsys, name, lambda tb, p: {}, expected)
    finally:
        testbed.ssh("decode", undo)


def test_a_masked_unit_is_refused_before_anything_is_touched(testbed: Testbed, tmp_path, capsys):
    """`systemctl mask` on a running unit: it runs on, but systemd refuses every restart. Preflight
    passed it; each trial that restarted decode then failed "is masked", and the restore's restart
    too ("restore of decode failed"), exit 1 after 3 trials."""
    unit = "/etc/systemd/system/sglang-dsv4-decode.service"  # the testbed's unit file: mask's own place
    testbed.ssh("decode", f"cp -a {unit} /root/unit.orig && ln -sf /dev/null {unit} && systemctl daemon-reload")
    try:
        assert (
            testbed.ssh("decode", "systemctl show -p LoadState --value sglang-dsv4-decode").stdout.strip() == "masked"
        )
        _refused_at_preflight(
            testbed, tmp_path, capsys, "masked unit", lambda tb, p: {}, "unit sglang-dsv4-decode is masked"
        )
    finally:
        testbed.ssh("decode", f"rm -f {unit} && mv /root/unit.orig {unit} && systemctl daemon-reload")
    assert testbed.ssh("decode", "systemctl show -p LoadState --value sglang-dsv4-decode").stdout.strip() == "loaded"


@pytest.mark.parametrize("shell", ["/usr/sbin/nologin", "/bin/false"])
def test_an_account_whose_shell_runs_no_command_is_refused_saying_so(testbed: Testbed, tmp_path, capsys, shell):
    """A service account's shell is often nologin or false. nologin's words were taken for a login
    shell that prints ("from ~/.bashrc, ~/.profile...?"); false, which prints nothing, passed the check
    and each command then failed on its own. Both: exit 2 at the `ssh:` address, naming the shell."""
    testbed.ssh(
        "decode", f"id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser; chsh -s {shell} orchuser"
    )
    try:
        _refused_at_preflight(
            testbed,
            tmp_path,
            capsys,
            "shell runs no command",
            lambda tb, p: dict(ssh_user="orchuser", ssh_sudo=True),
            "the login shell of orchuser runs no command (`true` exited 1",
        )
    finally:
        testbed.ssh("decode", "chsh -s /bin/bash orchuser")


def test_a_sweep_runs_on_a_host_whose_sshd_allows_one_session_per_connection(testbed: Testbed, tmp_path: Path, capsys):
    """Hardened hosts lower sshd's MaxSessions. With 1, a trial failed "connection lost:
    ChannelException(2, 'Connect failed')" where two of orch's commands met on decode (exit 1)."""
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    config, hup = "/etc/orch-testbed/sshd_config", "kill -HUP $(systemctl show -p MainPID --value orch-sshd)"
    testbed.ssh("decode", f"cp -a {config} /root/sshd_config.orig && sed -i '1i MaxSessions 1' {config} && {hup}")
    try:
        code, run_dir = sweep(testbed, tmp_path, "dsv4-pd", "--retries", "0")
        assert code == 0, capsys.readouterr().err
        assert [t.status for t in trials_of(run_dir)] == ["completed"] * 4
    finally:
        testbed.ssh("decode", f"mv /root/sshd_config.orig {config} && {hup}")
    assert snapshot(testbed, files) == before
    no_leftovers(testbed)


def test_an_env_file_the_unit_does_not_read_is_refused_and_a_link_to_it_is_not(testbed: Testbed, tmp_path, capsys):
    """env_file: naming a copy of the file the unit reads: the edits would go where no process looks.
    Preflight passed it (same values), and each changed trial failed verification blaming "a drop-in,
    or another EnvironmentFile=" (exit 1). A symlink to the file the unit reads is that file."""
    testbed.ssh("decode", "cp -a /etc/sglang/decode.env /etc/sglang/other.env")
    try:
        _refused_at_preflight(
            testbed,
            tmp_path,
            capsys,
            "env file the unit does not read",
            lambda tb, p: dict(env_file="/etc/sglang/other.env"),
            "env file /etc/sglang/other.env is read by none of its units with EnvironmentFile= "
            "(sglang-dsv4-decode reads /etc/sglang/decode.env)",
        )
    finally:
        testbed.ssh("decode", "rm -f /etc/sglang/other.env")
    testbed.ssh("decode", "mkdir -p /run/orch-link && ln -s /etc/sglang/decode.env /run/orch-link/decode.env")
    try:
        inventory = bad_inventory(testbed, tmp_path, "decode", env_file="/run/orch-link/decode.env")
        code = main(["run", str(tmp_path / "m.yaml"), "-i", str(inventory), "--out", str(tmp_path / "r2")])
        assert code == 0, capsys.readouterr().err
    finally:
        testbed.ssh("decode", "rm -rf /run/orch-link")


def test_sweep_as_an_unprivileged_user_with_sudo(testbed: Testbed, tmp_path: Path, capsys):
    """Root-owned env files and systemctl through `sudo -n`, connected as a normal user."""
    for host in ("prefill", "decode", "router"):
        testbed.ssh(
            host,
            "id orchuser >/dev/null 2>&1 || useradd -M -p '*' -s /bin/bash orchuser; "
            "echo 'orchuser ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/orchuser && chmod 440 /etc/sudoers.d/orchuser",
        )
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    owner = testbed.ssh("decode", "stat -c '%U %a' /etc/sglang/decode.env").stdout.strip()
    data = yaml.safe_load(testbed.inventory.read_text())
    for entry in data["testbeds"]["dsv4-pd"]["hosts"].values():
        entry["ssh"].update(user="orchuser", sudo=True)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(data))
    (tmp_path / "m.yaml").write_text(MATRIX)
    try:
        code = main(
            [
                "run",
                str(tmp_path / "m.yaml"),
                "-i",
                str(inventory),
                "--out",
                str(tmp_path / "reports"),
                "--run-id",
                "sudo",
            ]
        )
        assert code == 0, capsys.readouterr().err
        trials = trials_of(tmp_path / "reports" / "sudo")
        assert [t.status for t in trials] == ["completed"] * 4
        assert snapshot(testbed, files) == before
        assert testbed.ssh("decode", "stat -c '%U %a' /etc/sglang/decode.env").stdout.strip() == owner
        no_leftovers(testbed)
    finally:
        for host in ("prefill", "decode", "router"):
            testbed.ssh(host, "rm -f /etc/sudoers.d/orchuser")


def test_a_login_shell_that_prints_is_refused_before_anything_is_read_or_touched(
    testbed: Testbed, tmp_path: Path, capsys
):
    """A ~/.bashrc that echoes (bash reads it for an SSH command too) puts its words before every
    command's output: orch took them for the env file's first line (preflight warned "line 1: no
    `=`"), then stopped mid-run on "unexpected answer b'Welcome to decode\\norch-file ..." (exit 1),
    and a read without a header would have edited and restored a file with that line in it. Every
    connection checks first that a command prints nothing it did not print (rsync's "is your shell
    clean?"): exit 2 at the host's `ssh:` line, naming the words, nothing touched."""
    files = {**ENV_FILES, "decode": "/etc/sglang/decode.env"}
    before = snapshot(testbed, files)
    bashrc = "cp -a /root/.bashrc /root/.bashrc.orig 2>/dev/null; echo 'echo Welcome to decode' >> /root/.bashrc"
    testbed.ssh("decode", bashrc)
    try:
        code, run_dir = sweep(testbed, tmp_path, "dsv4-pd")
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip() and not line.startswith(" ")]
        assert code == 2, err
        text = testbed.inventory.read_text()
        where = f"{shown_path(testbed.inventory)}:{ssh_line_at(text, 'dsv4-pd', 'decode', 'host')}"
        (error,) = [line for line in lines if line.startswith("error:")]
        assert error.startswith(f"error: {where}: decode ("), err
        assert "its login shell prints 'Welcome to decode' before every command's output" in error, error
        assert "no `=`" not in err and not run_dir.exists()
    finally:
        testbed.ssh(
            "decode",
            "if [ -e /root/.bashrc.orig ]; then mv /root/.bashrc.orig /root/.bashrc; else rm -f /root/.bashrc; fi",
        )
    assert snapshot(testbed, files) == before  # read once the shell is quiet again: the test's ssh hears it too
    no_leftovers(testbed)
