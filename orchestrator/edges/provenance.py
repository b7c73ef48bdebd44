"""What ran: each unit's command line and what each server says about itself (EDGE).

Collected once per host, after its servers first answer healthy, for the report's provenance:
systemd's ExecStart (or the local unit's command) and the server's /get_server_info (SGLang
answers it with its version and settings; the simulator with its version and flags). Best
effort: a server without that endpoint, or a host that cannot tell, leaves the field empty
rather than failing a trial.
"""

from __future__ import annotations

import json

import httpx

from orchestrator.edges.deployment import HostHandle
from orchestrator.errors import OrchError

KEEP = (
    "version",
    "git_sha",
    "commit",
    "model_path",
    "served_model_name",
    "tp_size",
    "role",
    "disable_cuda_graph",
    "flags",
)
LIMIT = 600  # characters per field: provenance, not a dump


def describe_host(handle: HostHandle, client: httpx.Client) -> dict[str, str]:
    out: dict[str, str] = {}
    commands = [_exec_start(handle, unit) for unit in handle.units]
    if any(commands):
        out["exec_start"] = " | ".join(c for c in commands if c)[:LIMIT]
    info = _server_info(handle.host.url, client)
    if info:
        out["server_info"] = info
    return out


def _exec_start(handle: HostHandle, unit: str) -> str:
    spec = next((u for u in handle.host.units if u.name == unit), None)
    if spec is not None and spec.command:  # a local unit: its argv is the command line
        return " ".join(spec.command)
    try:
        res = handle.transport.run(
            ["systemctl", "show", "-p", "ExecStart", "--value", unit],
            timeout=10,
            check=False,
            sudo=bool(handle.host.ssh and handle.host.ssh.sudo),
        )
    except OrchError:
        return ""
    text = res.stdout.strip()
    # systemd prints "{ path=... ; argv[]=... ; ... }": the argv is what a reader wants
    if "argv[]=" in text:
        text = text.split("argv[]=", 1)[1].split(" ;", 1)[0]
    return text


def _server_info(base_url: str, client: httpx.Client) -> str:
    try:
        answer = client.get(base_url.rstrip("/") + "/get_server_info", timeout=2.0)
        if answer.status_code != 200:
            return ""
        data = answer.json()
    except (httpx.HTTPError, ValueError):
        return ""
    if isinstance(data, dict):
        kept = {k: data[k] for k in KEEP if k in data}
        return json.dumps(kept or data, sort_keys=True, default=str)[:LIMIT]
    return json.dumps(data, default=str)[:LIMIT]
