"""Benchmark: `orch serve`'s status views (/status, /api/status) over real HTTP on loopback, the
server of an older checkout (before) beside this one's (after), in the same run.

Each server is a subprocess (`orch serve --port P`, on 127.0.0.1, stopped by its pid) of its own
source tree: after is this checkout, before is `git archive REV orchestrator` (REV: --before,
the commit before the status views kept what they read). Its reports folder holds N small
finished run folders (run.json of a finished synthetic run, status.json finished), 2 running runs
(their controller: this process, alive) and 1 stale one (its controller's pid start time wrong:
gone), all aged past SETTLE_NS, as runs of past nights are. For each N and each endpoint a fresh
server answers two views (first: nothing cached; second: what the page's refresh asks every 5 s);
printed: seconds per view and the server's resident memory after the second view (VmRSS, and
its growth over the views), before and after side by side. Every after answer of /api/status is
checked equal to before's (but for `generated` and fields before did not have).

    python bench/bench_status.py [--runs 200,2000,20000] [--before 6ce425b]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from checkout import before_tree
from timing import load_line

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run generator shared with the tests

from helpers.report_synth import synthetic_run, write_run  # noqa: E402

from orchestrator.store.atomic import write_json_atomic  # noqa: E402
from orchestrator.store.liveness import StatusFile  # noqa: E402
from orchestrator.store.manifest import save_manifest  # noqa: E402
from orchestrator.store.processes import process_start  # noqa: E402

BEFORE = "6ce425b"  # main before the status views cached what they read
ENDPOINTS = ("/status", "/api/status")
SETTLE_S = 2.2  # store.stamps.SETTLE_NS and a margin: files older are kept by the cache


def status_file(run_id: str, state: str, pid: int, pid_start: int, updated: str) -> StatusFile:
    return StatusFile(
        run_id=run_id, name="bench", testbed="local", host=socket.gethostname(), pid=pid, pid_start=pid_start,
        state=state, started=updated, updated=updated, done=8, total=8 if state == "finished" else 16, failed=0,
    )  # fmt: skip


def make_reports(root: Path, n: int) -> Path:
    """n finished run folders (hard links of one run.json and one status.json: cheap to make,
    each read on its own), 2 running, 1 stale."""
    manifest, records = synthetic_run(replicates=1, failures=False)
    seed = write_run(root / "seed" / manifest.run_id, manifest, records)
    write_json_atomic(seed / "status.json", status_file(manifest.run_id, "finished", 1, 1, manifest.started))
    reports = root / "reports"
    reports.mkdir()
    for i in range(n):
        run = reports / f"20260509-{i:06d}-done"
        run.mkdir()
        for name in ("run.json", "status.json"):
            os.link(seed / name, run / name)
    me, start = os.getpid(), process_start(os.getpid()) or 0
    for name, pid_start in (("running-1", start), ("running-2", start), ("stale", start + 1)):
        run = reports / f"20260510-{name}"
        run.mkdir()
        save_manifest(run, manifest.model_copy(update={"status": "running"}))
        write_json_atomic(run / "status.json", status_file(name, "running", me, pid_start, manifest.started))
    return reports


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def serve(src: Path, reports: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    """`orch serve` of the tree at src (its orchestrator imported, not the installed one)."""
    port = free_port()
    code = (
        "import faulthandler, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True)\n"
        "sys.path.insert(0, sys.argv[1]); import orchestrator\n"
        "assert orchestrator.__file__.startswith(sys.argv[1]), orchestrator.__file__\n"
        "from orchestrator.cli.main import main\n"
        "sys.exit(main(['serve', '--reports', sys.argv[2], '--port', sys.argv[3]]))"
    )
    argv = [sys.executable, "-c", code, str(src), str(reports), str(port)]
    err_file = reports.parent / f"serve-{port}.err"  # its stacks, dumped if it outlives a SIGTERM
    with err_file.open("wb") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()  # listening: no view asked yet
            return proc, url, err_file
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"the server of {src} did not answer")


def views(src: Path, reports: Path, endpoint: str) -> tuple[list[float], int, int, str]:
    """Seconds of a first and a second view, VmRSS (KB) after them and its growth, the last body."""
    proc, url, err_file = serve(src, reports)
    try:
        start_kb, seconds, body = rss_kb(proc.pid), [], ""
        with httpx.Client(base_url=url, timeout=600, trust_env=False) as http:
            for _ in range(2):
                t0 = time.perf_counter()
                r = http.get(endpoint)
                seconds.append(time.perf_counter() - t0)
                assert r.status_code == 200, r.text[:500]
                body = r.text
        end_kb = rss_kb(proc.pid)
        return seconds, end_kb, end_kb - start_kb, body
    finally:
        stop(proc, err_file)


def stop(proc: subprocess.Popen[bytes], err_file: Path) -> None:
    """SIGTERM, as systemd stops `orch serve`. One that outlives it by 30 s (seen under load in full
    suite runs: SIGTERM caught, not pending, one thread polling; two ways to lose the Interrupted
    were closed in team.serve) is killed after its state is said: which signals it blocks, ignores
    and catches, where each thread waits, and every thread's Python stack."""
    proc.terminate()
    try:
        proc.wait(timeout=30)
        return
    except subprocess.TimeoutExpired:
        state = process_state(proc.pid)
        os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: every thread's Python stack to its stderr file
        time.sleep(1.0)
        proc.kill()
        proc.wait()
    stacks = err_file.read_text(errors="replace")[-2000:]
    raise SystemExit(f"orch serve (pid {proc.pid}) did not stop within 30 s of SIGTERM; killed. {state}\n{stacks}")


def process_state(pid: int) -> str:
    """Signal masks and each thread's state and kernel wait channel, from /proc (best effort)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        masks = " ".join(line.replace("\t", "") for line in status if line.startswith(("State", "Sig", "Shd")))
        threads = []
        for task in sorted(Path(f"/proc/{pid}/task").iterdir()):
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            threads.append(f"{task.name}:{stat[0]}:{(task / 'wchan').read_text() or '-'}")
        return f"{masks}; threads (tid:state:wchan) {' '.join(threads)}"
    except OSError as exc:
        return f"(its state could not be read: {exc})"


def same_answers(after: str, before: str) -> bool:
    """/api/status's runs alike, field by field, on the fields before's answer has (but `unreadable`,
    whose wording changed): a field added since (e.g. unreadable_file) is no difference."""
    a, b = json.loads(after)["runs"], json.loads(before)["runs"]
    return len(a) == len(b) and all(
        {k: new.get(k) for k in old if k != "unreadable"} == {k: v for k, v in old.items() if k != "unreadable"}
        for new, old in zip(a, b, strict=True)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="200,2000,20000", help="run folder counts, comma-separated")
    ap.add_argument("--before", default=BEFORE, help="the commit to compare with")
    args = ap.parse_args()
    print(load_line())
    print(f"before: {args.before}, after: this checkout; seconds per view, server VmRSS MB after 2 views (+growth)")
    print(f"{'folders':>8} {'endpoint':<12}{'1st before':>11}{'1st after':>10}{'2nd before':>11}{'2nd after':>10}"
          f"{'2nd b/a':>9}{'RSS before':>15}{'RSS after':>15}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-status-") as tmp:
        old = before_tree(args.before, Path(tmp))
        for n in (int(x) for x in args.runs.split(",")):
            root = Path(tmp) / f"n{n}"
            root.mkdir()
            reports = make_reports(root, n)
            time.sleep(SETTLE_S)
            for endpoint in ENDPOINTS:
                (b1, b2), b_kb, b_grow, b_body = views(old, reports, endpoint)
                (a1, a2), a_kb, a_grow, a_body = views(REPO, reports, endpoint)
                if endpoint == "/api/status":
                    assert same_answers(a_body, b_body), "after answers otherwise than before"
                print(
                    f"{n:>8} {endpoint:<12}{b1:>11.3f}{a1:>10.3f}{b2:>11.3f}{a2:>10.3f}{b2 / a2:>8.1f}x"
                    f"{b_kb / 1e3:>9.1f} +{b_grow / 1e3:<4.1f}{a_kb / 1e3:>9.1f} +{a_grow / 1e3:<4.1f}"
                )
            shutil.rmtree(root)


if __name__ == "__main__":
    main()
