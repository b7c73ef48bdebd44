"""The real SGLang PD router (`sglang-router`, installed by the test extra) in front of the
simulated workers: its command line, and an inventory of two sim workers behind it on free
loopback ports, for tests that must meet the real thing (tests/sim, tests/e2e, tests/testbed)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from helpers.netutil import free_ports


def router_argv(
    python: str,
    prefill: str | tuple[str, ...],
    decode: str | tuple[str, ...],
    *,
    host: str,
    port: int,
    metrics_port: int,
    bootstrap_port: int | None = None,
    check_interval_s: int = 60,
    extra: tuple[str, ...] = (),
) -> list[str]:
    """`python -m sglang_router.launch_router` in PD mode. check_interval_s is how often it checks
    the workers it knows (its default, 60 s, is the stale view orch must cope with); new workers
    are looked at every second, so it turns ready soon after its workers. Several prefill or decode
    URLs: one worker each (instances of a role behind one router); a bootstrap port goes with a
    single prefill only."""
    prefills = (prefill,) if isinstance(prefill, str) else prefill
    decodes = (decode,) if isinstance(decode, str) else decode
    bootstrap = [str(bootstrap_port)] if bootstrap_port is not None and len(prefills) == 1 else []
    return [
        python,
        "-m",
        "sglang_router.launch_router",
        "--pd-disaggregation",
        *[arg for url in prefills for arg in ("--prefill", url, *bootstrap)],
        *[arg for url in decodes for arg in ("--decode", url)],
        "--host",
        host,
        "--port",
        str(port),
        "--prometheus-host",
        host,
        "--prometheus-port",
        str(metrics_port),
        "--worker-startup-check-interval",
        "1",
        "--health-check-interval-secs",
        str(check_interval_s),
        "--log-level",
        "warn",
        *extra,
    ]


# The router's env file. SPT_NOENV=1: the router retitles its process (setproctitle), which by
# default overwrites the memory /proc/PID/environ reads, so orch could not verify its environment.
ROUTER_ENV = "# sglang-router takes its settings on the command line\nNO_COLOR=1\nSPT_NOENV=1\n"

ENV_FILES = {
    "prefill.env": "# prefill flags\nSIM_WARMUP_S=0.3\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\n",
    "decode.env": (
        "# decode flags\nSIM_WARMUP_S=0.3\nSIM_SEED=7\nSGLANG_DSV4_BF16_INDEX_K=1\n"
        'SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=1\nSGLANG_EXTRA_ARGS=""\n'
    ),
    "router.env": ROUTER_ENV,
}


def make_inventory(tmp_path: Path, stray_decode: str | None = None) -> tuple[Path, dict[str, int]]:
    """Sim prefill and decode behind the real router (its default 60 s worker health checks: a
    restarted decode is never rechecked during a test); returns the inventory and the ports.
    `stray_decode`: one more `--decode URL` on the router's command line, which the inventory
    does not have (a server orch did not start)."""
    names = ("prefill", "router", "decode", "bootstrap", "metrics")
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    for name, text in ENV_FILES.items():
        (tmp_path / name).write_text(text)
    pre, dec = f"http://127.0.0.1:{ports['prefill']}", f"http://127.0.0.1:{ports['decode']}"
    argv = router_argv(
        "{python}", pre, dec, host="127.0.0.1", port=ports["router"], metrics_port=ports["metrics"],
        bootstrap_port=ports["bootstrap"], extra=("--decode", stray_decode) if stray_decode else (),
    )  # fmt: skip
    router_cmd = "[" + ", ".join(f'"{a}"' for a in argv) + "]"
    srv = '["{python}", -m, orchestrator.sim.server'
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        textwrap.dedent(f"""\
        testbeds:
          real-router:
            state_dir: state
            hosts:
              prefill:
                env_file: prefill.env
                units: [{{name: t-prefill, command: {srv}, --role, prefill, --port, "{ports["prefill"]}",
                          --disaggregation-bootstrap-port, "{ports["bootstrap"]}"]}}]
                url: {pre}
                health_timeout: 30
              decode:
                env_file: decode.env
                units: [{{name: t-decode, command: {srv}, --role, decode, --port, "{ports["decode"]}"]}}]
                url: {dec}
                health_timeout: 30
              router:
                env_file: router.env
                units: [{{name: t-sglang-router, command: {router_cmd}}}]
                url: http://127.0.0.1:{ports["router"]}
                health_timeout: 30
                after: [prefill, decode]
        """)
    )
    return inv, ports
