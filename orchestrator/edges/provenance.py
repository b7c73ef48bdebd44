"""What ran: the controller, each unit's command line, what each server says about itself, the
GPUs and the env files (EDGE).

- Once per run, on the controller: orch's version and git commit (of the checkout it runs from),
  host, user, the exact command line (secrets masked), Python and the key packages' versions.
- Once per run, per host, after its servers first answer: systemd's ExecStart (or the local
  unit's command), the server's /get_server_info (or /server_info, newer SGLang), the GPU model,
  driver and CUDA version where nvidia-smi exists ("not available" elsewhere), and the sha256 of
  the env file as orch found it.
- Per trial, per host (TrialDescriber): the server version, a digest of its server info and of
  its units' command lines, and the sha256 of the env file the trial ran with. Only hosts whose
  units restarted are asked again (a unit that did not restart is the same process: the identity
  check proves it): one HTTP request and at most one command per host, hosts in parallel.

Best effort: a server without those endpoints, or a host that cannot tell, leaves the field
empty (or "not available") rather than failing a trial.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import platform
import shlex
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import httpx

from orchestrator import __version__
from orchestrator.core import gpuinfo
from orchestrator.core.records import SERVER_INFO_VOLATILE, Controller, TrialProvenance
from orchestrator.core.redact import Redactor
from orchestrator.edges.deployment import Deployment, HostHandle
from orchestrator.edges.httpread import get_json
from orchestrator.errors import OrchError

KEEP = (
    "version",
    "git_sha",
    "commit",
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "role",
    "disable_cuda_graph",
    "flags",
)
INFO_PATHS = ("/get_server_info", "/server_info")  # older SGLang (and the simulator), newer SGLang
LIMIT = 600  # characters per field of run.json's per-host lines: provenance, not a dump
INFO_TIMEOUT_S = 2.0  # one server-info request, in all
TEXT_LIMIT = 16_000  # a trial's server info, stored once per distinct text (SGLang's is a few KB)
PACKAGES = ("httpx", "pydantic", "numpy", "scipy", "statsmodels", "pandas", "jinja2", "ruamel.yaml", "pyyaml")


# ----------------------------------------------------------------------------- the controller
def describe_controller(redactor: Redactor, argv: Sequence[str] | None = None) -> Controller:
    """Where and how this run was started (argv: the command line; default this process's)."""
    commit, dirty = orch_commit()
    return Controller(
        orch_version=__version__,
        orch_commit=commit,
        orch_dirty=dirty,
        host=socket.gethostname(),
        user=_user(),
        command=redactor.text(shlex.join(sys.argv if argv is None else argv))[:2000],
        python=f"{platform.python_implementation()} {platform.python_version()}",
        packages=package_versions(PACKAGES),
    )


def orch_commit(root: Path | None = None) -> tuple[str, bool]:
    """(commit, dirty) of the git checkout orch runs from; ("", False) when it is installed."""
    root = root or Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return "", False
    try:
        head = _git(root, "rev-parse", "HEAD")
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "", False
    return (head.strip(), bool(status.strip())) if head.strip() else ("", False)


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False)
    return done.stdout if done.returncode == 0 else ""


def package_versions(names: Sequence[str]) -> dict[str, str]:
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry, no LOGNAME/USER
        return ""


# ----------------------------------------------------------------------------- once per host
def describe_host(
    handle: HostHandle, client: httpx.Client, original_env: bytes | None = None, redactor: Redactor | None = None
) -> dict[str, str]:
    redactor = redactor or Redactor()
    out: dict[str, str] = {}
    command = exec_start(handle)
    if command:
        out["exec_start"] = redactor.text(command)[:LIMIT]
    info = server_info(handle.host.url, client)
    if info is not None:
        out["server_info"] = redactor.text(info.summary)[:LIMIT]
        if info.version:
            out["server_version"] = info.version
    out.update({k: redactor.text(v)[:LIMIT] for k, v in gpu_facts(handle).lines().items()})  # as every field
    if original_env is not None:
        out["env_sha256_before"] = hashlib.sha256(original_env).hexdigest()
    return out


def gpu_facts(handle: HostHandle) -> gpuinfo.GpuInfo:
    """The host's GPUs (one command); "not available" without nvidia-smi or when it fails."""
    try:
        res = handle.transport.run(gpuinfo.COMMAND, timeout=20, check=False)
    except OrchError:
        return gpuinfo.GpuInfo()
    return gpuinfo.parse(res.stdout)


def exec_start(handle: HostHandle) -> str:
    """The command line of each of the host's units, joined by " | ": a local unit's argv, or
    systemd's ExecStart for all the host's units in one `systemctl show`."""
    local = {u.name: " ".join(u.command) for u in handle.host.units if u.command}
    remote = [u for u in handle.units if u not in local]
    shown = dict.fromkeys(handle.units, "")
    shown.update({u: c for u, c in local.items() if u in shown})
    if remote:
        try:
            res = handle.transport.run(
                ["systemctl", "show", "-p", "ExecStart", "--value", *remote],
                timeout=10,
                check=False,
                sudo=bool(handle.host.ssh and handle.host.ssh.sudo),
            )
            shown.update(zip(remote, parse_exec_start(res.stdout, len(remote)), strict=False))
        except OrchError:
            pass
    return " | ".join(c for c in shown.values() if c)


def parse_exec_start(text: str, units: int) -> list[str]:
    """One command line per unit from `systemctl show -p ExecStart --value U1 U2...` (units are
    separated by a blank line; systemd prints "{ path=... ; argv[]=... ; ... }": the argv is what
    a reader wants)."""
    blocks = text.strip("\n").split("\n\n") if units > 1 else [text]
    out = []
    for block in blocks[:units]:
        value = block.strip()
        if "argv[]=" in value:
            value = value.split("argv[]=", 1)[1].split(" ;", 1)[0]
        out.append(value)
    return out


class ServerInfo:
    """What a server says about itself: its version, the whole answer without its volatile fields
    (`text`: what a trial's digest covers, so any server argument that differs shows), and the few
    fields a reader wants first (`summary`: run.json's per-host line)."""

    def __init__(self, data: object) -> None:
        if isinstance(data, dict):
            stable = {k: v for k, v in data.items() if k not in SERVER_INFO_VOLATILE}
            self.version = str(data.get("version", ""))[:100]
            self.text = json.dumps(stable, sort_keys=True, default=str)
            self.summary = json.dumps({k: data[k] for k in KEEP if k in data} or stable, sort_keys=True, default=str)
        else:
            self.version, self.text = "", json.dumps(data, default=str)
            self.summary = self.text

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]


def server_info(base_url: str, client: httpx.Client) -> ServerInfo | None:
    """What the server says about itself, or None when it does not answer (200, JSON) within
    INFO_TIMEOUT_S in all and MAX_JSON_BYTES: best effort, a trickling or huge answer, or one
    nested too deep, leaves the field empty instead of holding up or ending the sweep."""
    for path in INFO_PATHS:
        try:
            status, data = get_json(client, base_url.rstrip("/") + path, deadline_s=INFO_TIMEOUT_S)
            if status == 404:
                continue
            return ServerInfo(data) if status == 200 else None
        except (httpx.HTTPError, OrchError):
            return None
    return None


# ----------------------------------------------------------------------------- per trial
class TrialDescriber:
    """Per trial, what served it on each host (see the module doc); each text goes into the record
    of the first trial that sees it, later trials carry its digest."""

    def __init__(self, deployment: Deployment, client: httpx.Client, redactor: Redactor) -> None:
        self.deployment, self.client, self.redactor = deployment, client, redactor
        self.current: dict[str, tuple[ServerInfo | None, str]] = {}  # host key -> (server info, exec start)
        self.seen: set[str] = set()  # digests already written to a record

    def describe(self, restarted: set[str], env: Mapping[str, bytes | None]) -> dict[str, TrialProvenance]:
        """`restarted`: host keys whose units restarted this trial; `env`: each host's env file."""
        stale = [k for k in self.deployment.hosts if k in restarted or k not in self.current]
        if len(stale) > 1:
            with ThreadPoolExecutor(max_workers=min(8, len(stale)), thread_name_prefix="provenance") as pool:
                self.current.update(zip(stale, pool.map(self._ask, stale), strict=True))
        elif stale:
            self.current[stale[0]] = self._ask(stale[0])
        return {key: self._facts(key, env.get(key)) for key in self.current}

    def _ask(self, key: str) -> tuple[ServerInfo | None, str]:
        handle = self.deployment.hosts[key]
        return server_info(handle.host.url, self.client), self.redactor.text(exec_start(handle))[:LIMIT]

    def _facts(self, key: str, env: bytes | None) -> TrialProvenance:
        info, command = self.current[key]
        info_sha = info.sha if info is not None else ""
        command_sha = hashlib.sha256(command.encode()).hexdigest()[:16] if command else ""
        return TrialProvenance(
            server_version=info.version if info is not None else "",
            server_info_sha=info_sha,
            server_info=self._once(info_sha, self.redactor.text(info.text)[:TEXT_LIMIT] if info is not None else ""),
            exec_start_sha=command_sha,
            exec_start=self._once(command_sha, command),
            env_sha256=hashlib.sha256(env).hexdigest() if env is not None else "",
        )

    def _once(self, sha: str, text: str) -> str:
        if not sha or sha in self.seen:
            return ""
        self.seen.add(sha)
        return text
