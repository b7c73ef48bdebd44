"""Metric extraction (pure) and the time-bound repro runner (real processes)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from helpers.procs import stop_running, wait_for_lines

from orchestrator.core.bounds import MAX_SESSIONS
from orchestrator.core.records import MetricValue
from orchestrator.edges import workload
from orchestrator.edges.workload import KILL_GRACE_S, TAIL_BYTES, MetricSpec, extract_metrics, run_command
from orchestrator.errors import ConfigError, WorkloadError

DSV4_OUTPUT = """\
session 1/40 done
session 2/40 leak detected
CORRUPTION sessions: 1/20 = 5%  (leak=1 no_tool=0 error=0 ok-ish[done/maxrounds]=19)
wall=159.9s counts={"done": 39, "no_tool": 1}
CORRUPTION sessions: 6/40 = 15%  (leak=5 no_tool=1 error=0 ok-ish[done/maxrounds]=34)
"""

CORRUPTION = MetricSpec("corruption", "proportion", r"CORRUPTION sessions: (?P<k>\d+)/(?P<n>\d+)", "sessions")
LEAK = MetricSpec("leak", "number", r"leak=(\d+)")
WALL = MetricSpec("wall", "number", r"wall=(?P<value>[\d.]+)s", "s")
DONE = MetricSpec("done", "number", r'"done": (?P<value>\d+)')


# ---------------------------------------------------------------- extract_metrics


def test_extracts_dsv4_summary() -> None:
    got = extract_metrics(DSV4_OUTPUT, [CORRUPTION, LEAK, WALL, DONE])
    assert got == {
        "corruption": MetricValue(kind="proportion", k=6, n=40, unit="sessions"),
        "leak": MetricValue(kind="number", value=5.0),
        "wall": MetricValue(kind="number", value=159.9, unit="s"),
        "done": MetricValue(kind="number", value=39.0),
    }
    assert got["corruption"].rate == pytest.approx(0.15)


def test_last_match_wins() -> None:
    text = "progress: 3/10\nprogress: 7/10\nprogress: 9/10\n"
    spec = MetricSpec("p", "proportion", r"progress: (?P<k>\d+)/(?P<n>\d+)")
    assert extract_metrics(text, [spec])["p"] == MetricValue(kind="proportion", k=9, n=10)


def test_regex_anchors_work_per_line() -> None:
    text = "wall=1.0s\nnoise wall=2.0s\nwall=3.5s trailing\n"
    spec = MetricSpec("wall", "number", r"^wall=(?P<value>[\d.]+)s")
    assert extract_metrics(text, [spec])["wall"].value == 3.5


def test_number_parses_signs_and_exponents() -> None:
    spec = MetricSpec("x", "number", r"x=(\S+)")
    assert extract_metrics("x=-1.5e-3\n", [spec])["x"].value == pytest.approx(-0.0015)


def test_garbage_output_names_every_missing_metric() -> None:
    garbage = "Traceback (most recent call last):\n" + "x" * 5000 + "\nConnectionError: refused\n"
    with pytest.raises(WorkloadError) as info:
        extract_metrics(garbage, [CORRUPTION, WALL, DONE])
    err = info.value
    assert "corruption (no match" in err.message
    assert "wall (no match" in err.message
    assert "done (no match" in err.message
    assert err.kind == "workload"
    # the output tail is quoted, but bounded
    assert err.detail.endswith("ConnectionError: refused\n")
    assert len(err.detail) < 2000


def test_only_missing_metrics_are_named() -> None:
    with pytest.raises(WorkloadError) as info:
        extract_metrics("wall=12.0s\n", [CORRUPTION, WALL])
    assert "corruption" in info.value.message
    assert "wall (" not in info.value.message


def test_k_greater_than_n_refused() -> None:
    with pytest.raises(WorkloadError, match=r"corruption \(41/40 is not a proportion"):
        extract_metrics("CORRUPTION sessions: 41/40 = 102%\n", [CORRUPTION])


def test_zero_sessions_refused() -> None:
    with pytest.raises(WorkloadError, match=r"0/0 is not a proportion"):
        extract_metrics("CORRUPTION sessions: 0/0 = nan%\n", [CORRUPTION])


def test_unparseable_number_refused() -> None:
    spec = MetricSpec("wall", "number", r"wall=(\S+)s")
    with pytest.raises(WorkloadError, match=r"wall \('abc' is not a number\)"):
        extract_metrics("wall=abcs\n", [spec])
    with pytest.raises(WorkloadError, match=r"is not a number"):
        extract_metrics("wall=nans\n", [spec])


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("inf", "is not a number"),
        ("-Infinity", "is not a number"),
        ("1e999", "is out of range"),
        ("-1e400", "is out of range"),
        ("1_000", "is not a number"),
        ("\u0661\u0662\u0663", "is not a number"),  # Arabic-Indic 123: float() takes it
        ("0x10", "is not a number"),
        ("1" * 500, "is not a number"),
    ],
)
def test_a_number_that_is_no_measurement_is_refused(text: str, why: str) -> None:
    """Before, "inf" and "1e999" were journaled as a completed trial with value null, and
    "1_000" or other scripts' digits were read as numbers."""
    spec = MetricSpec("wall", "number", r"wall=(\S+)s")
    with pytest.raises(WorkloadError, match=rf"wall \('.*' {why}"):
        extract_metrics(f"wall={text}s\n", [spec])


def test_counts_past_the_session_bound_or_in_other_digits_are_refused() -> None:
    with pytest.raises(WorkloadError, match=rf"more than {MAX_SESSIONS:,} sessions"):
        extract_metrics(f"CORRUPTION sessions: 1/{MAX_SESSIONS + 1}\n", [CORRUPTION])
    huge = "9" * 30  # before: accepted, and the report then crashed (OverflowError)
    with pytest.raises(WorkloadError, match=r"more than"):
        extract_metrics(f"CORRUPTION sessions: {huge}/{huge}\n", [CORRUPTION])
    spec = MetricSpec("c", "proportion", r"c=(?P<k>\w+)/(?P<n>\w+)")
    with pytest.raises(WorkloadError, match=r"group k='\u0661' is not an integer"):
        extract_metrics("c=\u0661/\u0665\n", [spec])
    assert extract_metrics(f"CORRUPTION sessions: 3/{MAX_SESSIONS}\n", [CORRUPTION])["corruption"].n == MAX_SESSIONS


def test_spec_without_usable_group_is_config_error() -> None:
    spec = MetricSpec("wall", "number", r"wall=(\d+)\.(\d+)s")
    with pytest.raises(ConfigError, match="repro.metrics.wall.regex"):
        extract_metrics("wall=1.5s\n", [spec])


# ---------------------------------------------------------------- run_command


def _run(tmp_path: Path, command: str, timeout_s: float = 10.0, **kw):  # noqa: ANN003, ANN202
    return run_command(
        command,
        timeout_s=timeout_s,
        cwd=kw.pop("cwd", tmp_path),
        env=kw.pop("env", None),
        stdout_path=tmp_path / "out" / "repro.out",
        stderr_path=tmp_path / "out" / "repro.err",
        **kw,
    )


def _read_pids(path: Path, expected: int) -> list[int]:
    pids = [int(x) for x in path.read_text().split()]
    assert len(pids) == expected, pids
    return pids


@pytest.mark.process
def test_exit_codes_and_streams(tmp_path: Path) -> None:
    ok = _run(tmp_path, "echo to-stdout; echo to-stderr >&2; exit 0")
    assert ok.exit_code == 0
    assert ok.stdout_tail == "to-stdout\n"
    assert (tmp_path / "out" / "repro.out").read_text() == "to-stdout\n"
    assert (tmp_path / "out" / "repro.err").read_text() == "to-stderr\n"
    assert ok.command == "echo to-stdout; echo to-stderr >&2; exit 0"
    assert 0 <= ok.duration_s < 2
    assert _run(tmp_path, "exit 7").exit_code == 7
    assert _run(tmp_path, "kill -9 $$").exit_code == -signal.SIGKILL


@pytest.mark.process
def test_env_and_cwd(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    outcome = _run(
        tmp_path, 'echo "$ORCH_TEST_VAR $(pwd)"', cwd=workdir, env={"ORCH_TEST_VAR": "bf16", "PATH": os.environ["PATH"]}
    )
    assert outcome.stdout_tail == f"bf16 {workdir}\n"


@pytest.mark.process
def test_a_repro_behind_a_proxy_reaches_the_loopback_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A repro that asks the router on 127.0.0.1 with requests/curl/httpx on a controller that
    exports a proxy (a lab's login node) went through that proxy: it is started with the loopback
    in NO_PROXY and no_proxy, its proxy kept (core.noproxy), as orch's local units are."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("no_proxy", "corp.example")
    monkeypatch.delenv("NO_PROXY", raising=False)
    outcome = _run(tmp_path, 'echo "$HTTPS_PROXY|$NO_PROXY|$no_proxy"')
    loop = "corp.example,127.0.0.1,localhost,::1"
    assert outcome.stdout_tail == f"http://proxy.corp:3128|{loop}|{loop}\n"


@pytest.mark.process
def test_large_output_streamed_to_file_with_bounded_tail(tmp_path: Path) -> None:
    # 8 MB of output, then a summary line: the file has all of it, the tail only the end
    outcome = _run(tmp_path, "head -c 8000000 /dev/zero | tr '\\0' 'x'; echo; echo 'wall=1.5s'")
    assert (tmp_path / "out" / "repro.out").stat().st_size == 8000000 + 1 + len("wall=1.5s\n")
    assert len(outcome.stdout_tail) == TAIL_BYTES
    assert outcome.stdout_tail.endswith("\nwall=1.5s\n")


@pytest.mark.process
def test_a_repro_printing_without_end_is_stopped_at_the_output_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before, a repro printing 1 GB a trial wrote it all into the run folder; its timeout may be
    hours away. The bound is lowered here; the check is the same."""
    monkeypatch.setattr(workload, "MAX_OUTPUT_BYTES", 1 << 20)
    pidfile = tmp_path / "pid"
    command = f"echo $$ > {pidfile}; while :; do head -c 65536 /dev/zero; sleep 0.01; done"
    with pytest.raises(WorkloadError, match=r"stopped after writing \d+ MiB to repro\.out \(more than 1 MiB"):
        _run(tmp_path, command, timeout_s=60)
    assert (tmp_path / "out" / "repro.out").stat().st_size < 16 << 20
    assert stop_running([int(pidfile.read_text())]) == []


@pytest.mark.process
def test_paths_relative_to_run_dir(tmp_path: Path) -> None:
    outcome = _run(tmp_path, "true", run_dir=tmp_path)
    assert outcome.stdout_path == "out/repro.out"
    assert outcome.stderr_path == "out/repro.err"


@pytest.mark.process
def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    command = (
        f"sh -c 'sleep 1000 & echo $! >> {pidfile}; wait' & echo $! >> {pidfile}; "
        f"sleep 1000 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"
    )
    started = time.monotonic()
    outcome = _run(tmp_path, command, timeout_s=0.5)
    elapsed = time.monotonic() - started
    assert outcome.exit_code is None
    assert 0.5 <= outcome.duration_s <= elapsed < 0.5 + KILL_GRACE_S  # SIGTERM sufficed
    pids = _read_pids(pidfile, 4)  # outer sh, inner sh, two sleeps
    assert stop_running(pids) == []


@pytest.mark.process
def test_timeout_sigkills_children_that_ignore_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    command = f"trap '' TERM; sleep 1000 & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"
    started = time.monotonic()
    outcome = _run(tmp_path, command, timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert outcome.exit_code is None
    assert 0.3 + KILL_GRACE_S * 0.9 <= elapsed < 0.3 + KILL_GRACE_S + 1.5
    assert stop_running(_read_pids(pidfile, 2)) == []


@pytest.mark.process
def test_leftover_background_children_are_killed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    outcome = _run(tmp_path, f"sleep 1000 & echo $! > {pidfile}; exit 3")
    assert outcome.exit_code == 3
    assert outcome.duration_s < KILL_GRACE_S
    assert stop_running(_read_pids(pidfile, 1)) == []


@pytest.mark.process
def test_ctrl_c_kills_the_group_then_reraises(tmp_path: Path) -> None:
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    pidfile = tmp_path / "pids"
    command = f"sh -c 'sleep 1000 & echo $! >> {pidfile}; wait' & echo $! >> {pidfile}; echo $$ >> {pidfile}; wait"

    def press_ctrl_c() -> None:
        wait_for_lines(pidfile, 3)
        os.kill(os.getpid(), signal.SIGINT)

    presser = threading.Thread(target=press_ctrl_c)
    started = time.monotonic()
    presser.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            _run(tmp_path, command, timeout_s=60)
    finally:
        presser.join()
    assert time.monotonic() - started < 5
    assert stop_running(_read_pids(pidfile, 3)) == []


@pytest.mark.process
def test_missing_cwd_is_a_workload_error(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="repro: cannot start 'true' in .*nowhere"):
        _run(tmp_path, "true", cwd=tmp_path / "nowhere")


def test_unwritable_output_path_is_a_workload_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(WorkloadError, match=r"file/repro.out: cannot write repro output"):
        run_command(
            "true",
            timeout_s=5,
            cwd=tmp_path,
            env=None,
            stdout_path=tmp_path / "file" / "repro.out",
            stderr_path=tmp_path / "repro.err",
        )


# ---- waiting for the exit: a pidfd, or CPython's polling wait on kernels without one ----------


@pytest.mark.process
@pytest.mark.parametrize("pidfd", [True, False])
def test_wait_exit_sees_the_exit_and_the_timeout(monkeypatch: pytest.MonkeyPatch, pidfd: bool) -> None:
    import subprocess

    from orchestrator.edges import workload

    if not pidfd:

        def no_pidfd(pid: int) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(workload.os, "pidfd_open", no_pidfd)
    quick = subprocess.Popen(["sh", "-c", "exit 3"])
    assert workload._wait_exit(quick, 10.0) is True and quick.wait() == 3
    slow = subprocess.Popen(["sleep", "30"])
    try:
        assert workload._wait_exit(slow, 0.2) is False and slow.poll() is None
    finally:
        slow.kill()
        slow.wait()


@pytest.mark.process
def test_run_command_times_out_without_a_pidfd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.edges import workload

    monkeypatch.setattr(workload.os, "pidfd_open", lambda pid: (_ for _ in ()).throw(OSError(38, "ENOSYS")))
    out = run_command(
        "sleep 30", timeout_s=0.3, cwd=tmp_path, env=None, stdout_path=tmp_path / "o", stderr_path=tmp_path / "e"
    )
    assert out.exit_code is None
    done = run_command(
        "echo hi", timeout_s=10, cwd=tmp_path, env=None, stdout_path=tmp_path / "o2", stderr_path=tmp_path / "e2"
    )
    assert done.exit_code == 0 and done.stdout_tail == "hi\n"
