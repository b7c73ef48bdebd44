"""A stranger on a health port, for the sim tests that prove such a trial is never data: a plain
HTTP server that answers 200 JSON to everything (health, server info, generate), and the small
one-factor matrix those tests run."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler


class AlwaysOk(BaseHTTPRequestHandler):
    """What a stranger on the port looks like to a health check: 200 to everything."""

    def _ok(self) -> None:
        body = json.dumps({"status": "ok"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _ok  # noqa: N815 (http.server's naming)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def stranger_overlap_matrix(name: str) -> str:
    """Two decode-only levels, two trials each, in order: prefill and the router are restarted by
    no trial, decode by every one."""
    return f"""\
name: {name}
factors:
  overlap:
    env: {{decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}}
    levels: [on, off]
replicates: 2
order: sequential
repro:
  command: "{{python}} -m orchestrator.sim.repro --router {{router_url}} --sessions 4 --rounds 1 --seed {{trial_seed}}"
  timeout: 60
  metrics:
    corruption: {{kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}}
"""
