"""Real test hosts for `testbed` tests: systemd 252 as PID 1 + OpenSSH, in namespaces.

`boot_testbed()` boots three hosts - prefill, router, decode - on a private bridge, each
running the bundled simulator as systemd units exactly like the real deployment
(EnvironmentFile=/etc/sglang/<role>.env, units sglang-dsv4-prefill / sglang-dsv4-decode /
sglang-router), and writes an inventory YAML for them. `testbed.sh` (beside this file) does
the namespace work; see its header. Nothing on this machine's filesystem is written except
the lab folder (pytest's tmp area): every host's root is an overlay on a tmpfs.

Units on the hosts (all started at boot):
  prefill  sglang-dsv4-prefill        :30000  EnvironmentFile=/etc/sglang/prefill.env
  decode   sglang-dsv4-decode         :30002  EnvironmentFile=/etc/sglang/decode.env
  decode   sglang-dsv4-decode-shell   :30012  SHELL dialect: /bin/bash -c 'set -a;
                                              . /etc/sglang/decode-shell.env; exec python ...'
  gpu2     sglang-dsv4-prefill        :30000  a second machine: prefill instance 1 and decode's node rank 1
           sglang-dsv4-decode         :30002  (EnvironmentFile=/etc/sglang/prefill.env, decode.env)
  router   sglang-router              :30001  -> prefill :30000, decode :30002
  router   sglang-router-shell        :30011  -> prefill :30000, decode-shell :30012
  router   sglang-router-real         :30021  the REAL sglang-router (PD mode, metrics :30024)
                                              -> prefill :30000, decode :30002
  router   sglang-router-wide         :30031  the REAL sglang-router (metrics :30034), NOT started at boot
                                              (a test starts it) -> prefill and gpu2 :30000, decode
                                              and gpu2 :30002: 2 prefill + 2 decode instances
The inventory has three testbeds: `dsv4-pd` (systemd dialect everywhere), `dsv4-pd-shell`
(decode in the shell dialect, through its own router; prefill is shared) and `dsv4-pd-real`
(as dsv4-pd, behind the real router, which checks its workers every 60 s, its default), then
`dsv4-pd-several` (issue 14): prefill as two instances (prefill, gpu2) and decode as one instance
over two nodes (decode is rank 0 and serves, gpu2 is rank 1), and `dsv4-pd-wide`: prefill and
decode as two instances each (prefill/gpu2, decode/gpu2) behind sglang-router-wide.

The hosts run the test process's own interpreter and checkout. Both may live where the host
sees a fresh tmpfs (/root, /tmp) or outside the root filesystem, so they are bind-mounted
read-only at the same paths, and units get PYTHONPATH=<checkout>.

Use in tests: the session fixture `testbed` (register it in a conftest with
`from testbed.fixture import testbed`). It skips with a reason when the machine cannot host
the testbed (not root, no overlay/cgroup2, tools missing) - unless CI=true, then it fails.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Literal

import pytest
import yaml
from helpers.real_router import ROUTER_ENV, router_argv

SCRIPT = Path(__file__).resolve().with_name("testbed.sh")
WARMUP_S = 0.3
SUBNETS = range(231, 251)  # 10.<n>.0.0/24 tried in turn; bridge otb<n-231>: a free one is claimed
CLAIM_SLICE = 4  # bridges per xdist worker slice (a worker holds at most 3 testbeds at once)
HOST_IPS = {"prefill": 2, "router": 3, "decode": 4, "gpu2": 5}
HIDDEN = ("/root", "/tmp", "/var/tmp", "/run", "/dev/shm", "/var/log/journal")  # fresh tmpfs inside
TOOLS = ("unshare", "nsenter", "setsid", "setpriv", "ip", "findmnt", "ssh", "ssh-keygen", "base64", "timeout")
Dialect = Literal["systemd", "shell"]


class TestbedUnsupported(RuntimeError):
    """This machine cannot host the testbed (message: why)."""

    __test__ = False  # not a pytest test class, despite the name


@dataclass(frozen=True)
class SimUnit:
    """One simulator unit on a host."""

    name: str
    role: Literal["prefill", "decode", "router"]
    port: int
    env_file: str
    dialect: Dialect = "systemd"
    upstream: tuple[str, str] | None = None  # router: (prefill url, decode url)
    health_path: str = "/health"
    real_router: bool = False  # the real sglang-router, not the simulator's stand-in
    more_upstream: tuple[str, str] | None = None  # real router: a second (prefill url, decode url)
    at_boot: bool = True  # started (and awaited) when the testbed boots; else a test starts it


@dataclass(frozen=True)
class TestbedHost:
    __test__ = False

    name: str  # also the role and the hostname inside
    ip: str
    units: tuple[SimUnit, ...]

    def unit(self, name: str) -> SimUnit:
        return next(u for u in self.units if u.name == name)


@dataclass(frozen=True)
class Testbed:
    """A booted testbed. Paths are on the controller; hosts reach each other by IP."""

    __test__ = False

    lab: Path
    bridge: str
    net: str  # e.g. "10.231.0"
    key: Path
    known_hosts: Path  # IP-keyed, for SshTransport / paramiko
    inventory: Path
    hosts: tuple[TestbedHost, ...]
    boot_s: float  # launch of the first host until all units answer healthy
    ssh_ready_s: float  # launch of the first host until sshd answers on all
    python: str
    checkout: Path
    env: dict[str, str] = field(repr=False, default_factory=dict)  # for testbed.sh calls

    def host(self, name: str) -> TestbedHost:
        return next(h for h in self.hosts if h.name == name)

    def url(self, host: str, unit: str | None = None) -> str:
        h = self.host(host)
        u = h.unit(unit) if unit else h.units[0]
        return f"http://{h.ip}:{u.port}"

    def ssh(
        self, host: str, command: str, *, user: str = "root", check: bool = True, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        """Run a command with the OpenSSH client: independent of the code under test. The calls
        share one connection per host and user (OpenSSH's own multiplexing, closed 15 s after
        its last use and at shutdown): a new connection cost ~340 ms a call, a shared one ~25 ms.
        A dropped master (sshd killed on the host) leaves a dead socket, which ssh replaces."""
        cfg = self.lab / "state" / host / "ssh_config"
        mux = ["-o", "ControlMaster=auto", "-o", f"ControlPath={mux_dir(self.lab)}/%C", "-o", "ControlPersist=15"]
        proc = subprocess.run(
            ["ssh", "-F", str(cfg), *mux, "-l", user, host, command],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{host}: `{command}` exited {proc.returncode}: {proc.stderr.strip()}")
        return proc

    def script(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _script(self.env, *args, check=check)


# ------------------------------------------------------------------------------- preflight
def unsupported_reason() -> str | None:
    """Why this machine cannot boot the testbed, or None."""
    if sys.platform != "linux":
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (namespaces, overlay mounts, veth)"
    if "overlay" not in Path("/proc/filesystems").read_text():
        return "kernel has no overlay filesystem"
    if not cgroup2_mount():
        return "no cgroup2 mount"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    missing += [p for p in ("/usr/sbin/sshd", "/usr/lib/systemd/systemd") if not os.access(p, os.X_OK)]
    if missing:
        return f"missing: {', '.join(missing)} (apt-get install openssh-server systemd iproute2 util-linux)"
    if _root_locked():
        return "root is locked in /etc/shadow ('!'): sshd with UsePAM no refuses it"
    return None


def require_support() -> None:
    """Skip (or, when CI=true, fail) if the testbed cannot run here."""
    reason = unsupported_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"testbed cannot run on this CI machine: {reason}")
    pytest.skip(f"testbed: {reason}")


def cgroup2_mount() -> str | None:
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup2":
            return parts[1]
    return None


def _root_locked() -> bool:
    try:
        for line in Path("/etc/shadow").read_text().splitlines():
            if line.startswith("root:"):
                return line.split(":")[1].startswith("!")
    except OSError:
        return False
    return False


# ------------------------------------------------------------------------------- layout (pure)
def layout(net: str) -> tuple[TestbedHost, ...]:
    """The three hosts and their units for subnet `net` (e.g. "10.231.0")."""
    ip = {name: f"{net}.{n}" for name, n in HOST_IPS.items()}
    pre, dec = f"http://{ip['prefill']}:30000", f"http://{ip['decode']}"
    return (
        TestbedHost(
            "prefill", ip["prefill"], (SimUnit("sglang-dsv4-prefill", "prefill", 30000, "/etc/sglang/prefill.env"),)
        ),
        TestbedHost(
            "router",
            ip["router"],
            (
                SimUnit(
                    "sglang-router",
                    "router",
                    30001,
                    "/etc/sglang/router.env",
                    upstream=(pre, f"{dec}:30002"),
                    health_path="/readiness",
                ),
                SimUnit(
                    "sglang-router-shell",
                    "router",
                    30011,
                    "/etc/sglang/router-shell.env",
                    upstream=(pre, f"{dec}:30012"),
                    health_path="/readiness",
                ),
                SimUnit(
                    "sglang-router-real",
                    "router",
                    30021,
                    "/etc/sglang/router-real.env",
                    upstream=(pre, f"{dec}:30002"),
                    health_path="/readiness",
                    real_router=True,
                ),
                SimUnit(
                    "sglang-router-wide",
                    "router",
                    30031,
                    "/etc/sglang/router-wide.env",
                    upstream=(pre, f"{dec}:30002"),
                    health_path="/readiness",
                    real_router=True,
                    more_upstream=(f"http://{ip['gpu2']}:30000", f"http://{ip['gpu2']}:30002"),
                    at_boot=False,
                ),
            ),
        ),
        TestbedHost(
            "decode",
            ip["decode"],
            (
                SimUnit("sglang-dsv4-decode", "decode", 30002, "/etc/sglang/decode.env"),
                SimUnit("sglang-dsv4-decode-shell", "decode", 30012, "/etc/sglang/decode-shell.env", dialect="shell"),
            ),
        ),
        # a second GPU machine (issue 14): roles of several hosts (a second prefill instance, decode's node 1)
        TestbedHost(
            "gpu2",
            ip["gpu2"],
            (
                SimUnit("sglang-dsv4-prefill", "prefill", 30000, "/etc/sglang/prefill.env"),
                SimUnit("sglang-dsv4-decode", "decode", 30002, "/etc/sglang/decode.env"),
            ),
        ),
    )


def env_file_text(unit: SimUnit) -> str:
    """Initial flags, like inventory/local/*.env; `export` lines for the shell dialect."""
    if unit.real_router:
        return ROUTER_ENV
    values = [("SIM_WARMUP_S", f"{WARMUP_S}"), ("SIM_SEED", "7")]
    if unit.role != "router":
        values.append(("SGLANG_DSV4_BF16_INDEX_K", "1"))
    if unit.role == "decode":
        values += [("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", "1"), ("SGLANG_EXTRA_ARGS", '""')]
    if unit.dialect == "shell":
        head = f"# {unit.role} flags (shell dialect: sourced by the unit's wrapper, set -a; . FILE)\n"
        return head + "".join(f"export {k}={v}\n" for k, v in values)
    head = f"# {unit.role} flags (read by systemd: EnvironmentFile=)\n"
    return head + "".join(f"{k}={v}\n" for k, v in values)


def unit_file_text(unit: SimUnit, python: str, checkout: Path) -> str:
    """A unit like the real deployment's: Type=exec, restart on failure, default start limit."""
    argv = [python, "-m", "orchestrator.sim.server", "--role", unit.role, "--port", str(unit.port), "--host", "0.0.0.0"]
    if unit.real_router and unit.upstream:
        pre, dec = zip(unit.upstream, unit.more_upstream or unit.upstream, strict=True)  # (first, second) each
        pres, decs = (pre, dec) if unit.more_upstream else (pre[0], dec[0])
        # several instances of a role: round robin, so each gets its share of any 8 sessions (the
        # default, cache_aware, sends sessions that share a long prompt to the instance whose cache
        # the router thinks holds it: a restarted decode.0 got none of 8 in one run of the
        # instances test, 3 of 8 in the next trial)
        extra = ("--policy", "round_robin") if unit.more_upstream else ()
        argv = router_argv(python, pres, decs, host="0.0.0.0", port=unit.port, metrics_port=unit.port + 3, extra=extra)
    elif unit.upstream:
        argv += ["--prefill-url", unit.upstream[0], "--decode-url", unit.upstream[1]]
    if unit.dialect == "shell":
        inner = f"set -a; . {unit.env_file}; exec " + " ".join(_sh_quote(a) for a in argv)
        exec_start, env_line = f"/bin/bash -c {_sd_quote(inner)}", ""
    else:
        exec_start, env_line = " ".join(_sd_quote(a) for a in argv), f"EnvironmentFile={unit.env_file}\n"
    return (
        "[Unit]\n"
        f"Description=orch testbed: {'real sglang-router' if unit.real_router else 'simulated ' + unit.role} "
        f"({unit.dialect} dialect)\n"
        "DefaultDependencies=no\nAfter=systemd-journald.socket\n"
        "[Service]\nType=exec\n"
        f"{env_line}"
        f"Environment={_sd_quote(f'PYTHONPATH={checkout}')} PYTHONPYCACHEPREFIX=/var/tmp/pycache PYTHONUNBUFFERED=1\n"
        f"ExecStart={exec_start}\n"
        "Restart=on-failure\nRestartSec=1\n"
    )


def _sd_quote(arg: str) -> str:
    """Quote one word for systemd's ExecStart=/Environment= (no $VAR or %specifier expansion)."""
    escaped = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def _sh_quote(arg: str) -> str:
    return shlex.quote(arg)


def inventory_data(tb_hosts: tuple[TestbedHost, ...], key: Path, known_hosts: Path) -> dict[str, object]:
    """The inventory YAML (format of inventory/example-pd.yaml) for both testbeds."""
    hosts = {h.name: h for h in tb_hosts}

    def entry(host: TestbedHost, unit: SimUnit, after: list[str] | None = None) -> dict[str, object]:
        base = f"http://{host.ip}:{unit.port}"
        d: dict[str, object] = {
            "transport": "ssh",
            "ssh": {
                "host": host.ip,
                "port": 22,
                "user": "root",
                "key": str(key),
                "known_hosts": str(known_hosts),
                "accept_new_host_keys": False,
                "connect_timeout": 5,
                "sudo": False,
            },
            "env_file": unit.env_file,
            "dialect": unit.dialect,
            "units": [unit.name],
            "url": base,
            "health": base + unit.health_path,
            "health_timeout": 30,
            "startup_estimate": WARMUP_S + 0.5,
            "verify_env": True,
        }
        if after:
            d["after"] = after
        return d

    def testbed(decode_unit: str, router_unit: str, description: str) -> dict[str, object]:
        return {
            "description": description,
            "hosts": {
                "prefill": entry(hosts["prefill"], hosts["prefill"].units[0]),
                "decode": entry(hosts["decode"], hosts["decode"].unit(decode_unit)),
                "router": entry(hosts["router"], hosts["router"].unit(router_unit), ["prefill", "decode"]),
            },
        }

    def spread(role: str, unit: str, shape: str, members: list[TestbedHost]) -> dict[str, object]:
        d = entry(members[0], members[0].unit(unit))
        del d["url"], d["health"]
        d["ssh"] = {k: v for k, v in d["ssh"].items() if k != "host"}  # type: ignore[attr-defined]
        port = members[0].unit(unit).port
        d[shape] = [
            {"ssh": {"host": h.ip}, **({"url": f"http://{h.ip}:{port}"} if shape == "instances" or i == 0 else {})}
            for i, h in enumerate(members)
        ]
        return d

    def several() -> dict[str, object]:
        """Roles of several hosts: prefill as two instances, decode as one instance on two nodes."""
        return {
            "description": "prefill: 2 instances (prefill, gpu2); decode: 1 instance on 2 nodes (decode, gpu2)",
            "hosts": {
                "prefill": spread("prefill", "sglang-dsv4-prefill", "instances", [hosts["prefill"], hosts["gpu2"]]),
                "decode": spread("decode", "sglang-dsv4-decode", "nodes", [hosts["decode"], hosts["gpu2"]]),
                "router": entry(hosts["router"], hosts["router"].unit("sglang-router"), ["prefill", "decode"]),
            },
        }

    def wide() -> dict[str, object]:
        """2 prefill + 2 decode instances behind one real router (sglang-router-wide)."""
        pair = [hosts["prefill"], hosts["gpu2"]], [hosts["decode"], hosts["gpu2"]]
        return {
            "description": "prefill: 2 instances (prefill, gpu2); decode: 2 instances (decode, gpu2); real router",
            "hosts": {
                "prefill": spread("prefill", "sglang-dsv4-prefill", "instances", pair[0]),
                "decode": spread("decode", "sglang-dsv4-decode", "instances", pair[1]),
                "router": entry(hosts["router"], hosts["router"].unit("sglang-router-wide"), ["prefill", "decode"]),
            },
        }

    return {
        "testbeds": {
            "dsv4-pd": testbed(
                "sglang-dsv4-decode", "sglang-router", "3 real systemd+sshd hosts running the simulator"
            ),
            "dsv4-pd-shell": testbed(
                "sglang-dsv4-decode-shell",
                "sglang-router-shell",
                "same hosts; decode reads `export KEY=VALUE` through a wrapper shell",
            ),
            "dsv4-pd-real": testbed(
                "sglang-dsv4-decode", "sglang-router-real", "same hosts; the router role is the real sglang-router"
            ),
            "dsv4-pd-several": several(),
            "dsv4-pd-wide": wide(),
        }
    }


def bind_paths(python: str, checkout: Path, lab: Path) -> list[str]:
    """Directories the units need that a host would not see: under a path the host gets a
    fresh tmpfs on, or on another filesystem than / (the overlay's lower layer is / only)."""
    exe = Path(python)
    wanted = {Path(sys.prefix), Path(sys.base_prefix), exe.parent.parent, exe.resolve().parent.parent, checkout}
    root_dev = os.stat("/").st_dev
    hidden = (*HIDDEN, str(lab))
    out: list[str] = []
    for p in sorted({w.resolve() for w in wanted if w.exists()}, key=lambda q: len(q.parts)):
        if any(p == Path(o) or Path(o) in p.parents for o in out):
            continue
        if os.stat(p).st_dev != root_dev or any(str(p) == h or str(p).startswith(h + "/") for h in hidden):
            out.append(str(p))
    return out


# ------------------------------------------------------------------------------- boot / teardown
def boot_testbed(
    lab: Path, *, python: str = sys.executable, checkout: Path | None = None, ready_timeout_s: float = 60.0
) -> Testbed:
    """Boot the three hosts in `lab` (created; must be private to this run) and wait until
    every unit is healthy. On any failure everything booted so far is torn down."""
    reason = unsupported_reason()
    if reason:
        raise TestbedUnsupported(reason)
    import orchestrator

    checkout = checkout or Path(orchestrator.__file__).resolve().parent.parent
    lab.mkdir(parents=True, exist_ok=True)
    (lab / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "OTB_LAB": str(lab), "TMPDIR": str(lab / "tmp")}
    env.pop("SSH_AUTH_SOCK", None)  # the lab key only, never an agent of the caller's
    env = _claim_network(env)
    reaper = _start_reaper(env, lab)
    try:
        return _boot(lab, env, python, checkout, ready_timeout_s, reaper)
    except BaseException:
        _stop_reaper(reaper)
        _script(env, "down-all", check=False)
        raise


def _boot(
    lab: Path, env: dict[str, str], python: str, checkout: Path, ready_timeout_s: float, reaper: subprocess.Popen[bytes]
) -> Testbed:
    hosts = layout(env["OTB_NET"])
    binds = " ".join(bind_paths(python, checkout, lab))
    extras = {h.name: _stage(lab, h, python, checkout) for h in hosts}
    t0 = time.monotonic()

    def up(h: TestbedHost) -> None:
        wants = " ".join(f"{u.name}.service" for u in h.units if u.at_boot)
        _script(
            {**env, "OTB_STAGE_EXTRA": str(extras[h.name]), "OTB_WANTS": wants, "OTB_BINDS": binds}, "up", h.name, h.ip
        )
        _script(env, "wait", h.name, "30")

    _in_parallel(up, hosts)
    ssh_ready = time.monotonic() - t0
    _wait_healthy(hosts, ready_timeout_s)
    boot = time.monotonic() - t0
    known = lab / "known_hosts"
    known.write_text("".join((lab / "state" / h.name / "known_hosts").read_text() for h in hosts))
    key = lab / "keys" / "id_ed25519"
    inventory = lab / "inventory.yaml"
    inventory.write_text(yaml.safe_dump(inventory_data(hosts, key, known), sort_keys=False))
    tb = Testbed(
        lab, env["OTB_BR"], env["OTB_NET"], key, known, inventory, hosts, boot, ssh_ready, python, checkout, env
    )
    _REAPERS[tb.bridge] = reaper
    return tb


def mux_dir(lab: Path) -> Path:
    """Where Testbed.ssh's shared connections keep their sockets: short (a socket path holds at
    most 108 bytes; ssh adds 17 while it binds), one per testbed, private to root."""
    path = Path("/tmp", f"orch-tb-ssh-{hashlib.sha256(str(lab).encode()).hexdigest()[:12]}")
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def close_shared_connections(lab: Path) -> None:
    """End Testbed.ssh's shared connections to this testbed (before its hosts go away)."""
    folder = mux_dir(lab)
    for sock in folder.iterdir():
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "testbed"], capture_output=True, timeout=10)
    shutil.rmtree(folder, ignore_errors=True)


def shutdown(tb: Testbed) -> None:
    """Tear every host down (kill -9 of each PID 1, cgroups, netns, bridge) and check it."""
    reaper = _REAPERS.pop(tb.bridge, None)
    if reaper is not None:
        _stop_reaper(reaper)
    close_shared_connections(tb.lab)
    tb.script("down-all")
    left = subprocess.run(["ip", "link", "show", tb.bridge], capture_output=True)
    if left.returncode == 0 or (tb.lab / "state").exists():
        raise AssertionError(f"testbed teardown left {tb.bridge} or {tb.lab / 'state'} behind")


@contextmanager
def running_testbed(lab: Path, **kwargs: object) -> Iterator[Testbed]:
    tb = boot_testbed(lab, **kwargs)  # type: ignore[arg-type]
    try:
        yield tb
    finally:
        shutdown(tb)


_REAPERS: dict[str, subprocess.Popen[bytes]] = {}  # bridge -> its guard process


def _script(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise RuntimeError(f"testbed.sh {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc


def _in_parallel(fn: Callable[[TestbedHost], None], hosts: tuple[TestbedHost, ...]) -> None:
    """Boot hosts at once (the bridge and key exist already); raise the first failure."""
    errors: list[BaseException] = []

    def call(h: TestbedHost) -> None:
        try:
            fn(h)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(h,), name=f"boot-{h.name}") for h in hosts]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]


def _claim_network(env: dict[str, str]) -> dict[str, str]:
    """Claim the first free bridge + subnet (creating the bridge is the atomic claim), so two
    test runs on one machine never share hosts. The search starts at this xdist worker's own
    slice (see claim_order): a bridge another worker has just freed is not claimed at once, so a
    test that checks its bridge is gone after teardown cannot see a neighbour's new one."""
    errors = []
    for i in claim_order(os.environ.get("PYTEST_XDIST_WORKER", "")):
        trial = {**env, "OTB_BR": f"otb{i}", "OTB_NET": f"10.{SUBNETS[i]}.0"}
        proc = _script(trial, "net-up", check=False)
        if proc.returncode == 0:
            return trial
        errors.append(proc.stderr.strip())
    raise TestbedUnsupported(f"no free bridge/subnet for the testbed: {errors[-1] if errors else '?'}")


def claim_order(worker: str) -> list[int]:
    """Indices into SUBNETS in the order to try them: worker gwK (pytest-xdist; the variable is
    inherited by scripts the tests start) begins at slice K of CLAIM_SLICE bridges, anything
    else at 0; all indices come once, so a full slice falls back to the others."""
    start = 0
    if worker.startswith("gw") and worker[2:].isdigit():
        start = int(worker[2:]) * CLAIM_SLICE % len(SUBNETS)
    return [(start + k) % len(SUBNETS) for k in range(len(SUBNETS))]


def _stage(lab: Path, host: TestbedHost, python: str, checkout: Path) -> Path:
    root = lab / "extra" / host.name
    units, conf = root / "etc/systemd/system", root / "etc/sglang"
    units.mkdir(parents=True, exist_ok=True)
    conf.mkdir(parents=True, exist_ok=True)
    for u in host.units:
        (units / f"{u.name}.service").write_text(unit_file_text(u, python, checkout))
        Path(root, u.env_file.lstrip("/")).write_text(env_file_text(u))
    return root


def _wait_healthy(hosts: tuple[TestbedHost, ...], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    pending = {f"http://{h.ip}:{u.port}{u.health_path}" for h in hosts for u in h.units if u.at_boot}
    last: dict[str, str] = {}
    while pending:
        for url in sorted(pending):
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status == 200:
                        pending.discard(url)
            except (urllib.error.URLError, OSError) as exc:
                last[url] = str(exc)
        if pending and time.monotonic() > deadline:
            raise RuntimeError(
                f"testbed units not healthy after {timeout_s:g} s: "
                + "; ".join(f"{u}: {last.get(u, '?')}" for u in sorted(pending))
            )
        if pending:
            time.sleep(0.05)


def _start_reaper(env: dict[str, str], lab: Path) -> subprocess.Popen[bytes]:
    """A guard that tears the hosts down if this process dies without its finalizers
    (SIGKILL, OOM): the hosts would otherwise outlive the test run."""
    log = open(lab / "reaper.log", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [str(SCRIPT), "reaper", str(os.getpid())],
            env=env,
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()


def _stop_reaper(reaper: subprocess.Popen[bytes]) -> None:
    if reaper.poll() is None:
        os.kill(reaper.pid, signal.SIGKILL)  # by PID; its `sleep 0.5` child ends by itself
        reaper.wait(timeout=10)


# ------------------------------------------------------------------------------- pytest fixture
_SESSION: list[Testbed] = []
_USERS = [0]
_LOCK = threading.Lock()


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Testbed]:
    """Three booted hosts for the whole session. Safe to register in several conftests:
    they share one testbed, torn down when the last user finishes."""
    require_support()
    with _LOCK:
        if not _SESSION:
            _SESSION.append(boot_testbed(tmp_path_factory.mktemp("lab", numbered=True)))
        _USERS[0] += 1
        tb = _SESSION[0]
    try:
        yield tb
    finally:
        with _LOCK:
            _USERS[0] -= 1
            if _USERS[0] == 0:
                _SESSION.clear()
                shutdown(tb)
