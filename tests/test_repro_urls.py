"""A repro that names a server by a literal URL must name one of orch's (core.reprourls): a URL on
loopback or an inventory host whose port the inventory does not serve is refused before anything
is planned (file:line, exit 2, nothing touched), with the placeholder to write instead. Other hosts
(downloads, dashboards), placeholders and what the matrix allows are left alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.core.endpoints import LOOPBACK, canonical_host
from orchestrator.core.plan import make_plan
from orchestrator.core.reprourls import Origin, origins
from orchestrator.errors import ConfigError

MATRIX = """\
name: urls
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
repro:
  command: "COMMAND"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""
COMMAND_LINE = 7  # the line of `command:` in MATRIX

# the demo's shape: three local processes; the router's Prometheus port is only on its command line
LOCAL = """\
testbeds:
  local:
    hosts:
      prefill:
        env_file: p.env
        units: [{name: p, command: [sim, --port, "30000", --disaggregation-bootstrap-port, "30003"]}]
        url: http://127.0.0.1:30000
      decode:
        env_file: d.env
        units: [{name: d, command: [sim, --port, "30002"]}]
        url: http://127.0.0.1:30002
      router:
        env_file: r.env
        units: [{name: r, command: [router, --port, "30001", --prometheus-port=30004]}]
        url: http://127.0.0.1:30001
        after: [prefill, decode]
"""

# real hosts: only their URLs are known (systemd units carry no command line in the inventory)
REMOTE = """\
testbeds:
  pd:
    hosts:
      prefill:
        transport: ssh
        ssh: {host: 10.0.0.2, user: sglang}
        env_file: /etc/sglang/prefill.env
        units: [sglang-prefill]
      decode:
        transport: ssh
        ssh: {host: gpu-decode, user: sglang}
        env_file: /etc/sglang/decode.env
        units: [sglang-decode]
        url: http://10.0.0.4:30002
      router:
        transport: ssh
        ssh: {host: 10.0.0.3, user: sglang}
        env_file: /etc/sglang/router.env
        units: [sglang-router]
        after: [prefill, decode]
"""


def plan(tmp_path: Path, command: str, inventory: str = LOCAL, extra: str = "") -> None:
    """Read and plan a matrix whose repro command is `command` (ConfigError if refused)."""
    (tmp_path / "m.yaml").write_text(MATRIX.replace("COMMAND", command) + extra)
    (tmp_path / "inv.yaml").write_text(inventory)
    testbed = read_inventory(tmp_path / "inv.yaml").testbed(None)
    make_plan(read_matrix(tmp_path / "m.yaml", "m.yaml"), testbed, seed=1)


def refused(tmp_path: Path, command: str, inventory: str = LOCAL, extra: str = "") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        plan(tmp_path, command, inventory, extra)
    return info.value


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:30009",  # a typo'd port
        "http://localhost:31001/v1",
        "http://127.0.0.2:30009",  # all of 127/8 is this machine
        "http://[::1]:8000",
        "http://0.0.0.0:8000",  # connects to this machine on Linux
        "http://[::ffff:127.0.0.1]:8000",
        "http://LOCALHOST.:8000",
        "http://127.0.0.1",  # port 80, which no role serves
        "http://127.0.0.1:99999",  # no port at all
        # how the C library (and so curl, Python's sockets) also reads 127.0.0.1: inet_aton's forms
        "http://127.1:30009",
        "http://2130706433:30009",
        "http://0x7f.0.0.1:30009",
        "http://0177.0.0.1:30009",
        "http://0:30009",  # 0.0.0.0
        "http://api.localhost:30009",  # RFC 6761: every name under .localhost is loopback
    ],
)
def test_a_loopback_url_on_a_port_no_role_serves_is_refused_at_its_line(tmp_path: Path, url: str) -> None:
    err = refused(tmp_path, f"repro --router {url} --sessions 4")
    assert (err.file, err.line, err.path) == ("m.yaml", COMMAND_LINE, "repro.command")
    assert "none of the servers of testbed 'local'" in str(err) and "its trials would count as data" in str(err)
    assert "30000, 30001, 30002, 30003, 30004" in str(err)  # what orch does know there
    assert err.hint is not None and "{router_url}" in err.hint and "repro.allow_urls" in err.hint


@pytest.mark.parametrize(
    "command",
    [
        "repro --router {router_url} --prefill {prefill_url}",  # placeholders are the inventory's
        "repro --router http://127.0.0.1:30001 --direct http://localhost:30002/generate",  # roles' ports
        "curl -s http://127.0.0.1:30004/metrics",  # the router's --prometheus-port=30004 on its command line
        "curl -s http://127.0.0.1:30003/route",  # the prefill's bootstrap port, on its command line
        "huggingface-cli download x --endpoint https://huggingface.co && repro --router {router_url}",
        "repro --router {router_url} --model-url http://10.9.9.9:1234",  # a host orch does not know
        "repro --url http://127.0.0.1:{{port}}",  # literal braces: no port written, nothing to judge
        "repro --router {router_url} --note 'see http://wiki.example/port-30009'",
    ],
)
def test_urls_of_orchs_servers_or_of_other_hosts_pass(tmp_path: Path, command: str) -> None:
    plan(tmp_path, command)


@pytest.mark.parametrize(
    "command",
    [
        "repro --router http://localhost:$ROUTER_PORT/v1",  # was refused: 'its invalid port'
        "repro --router http://127.0.0.1:${{ROUTER_PORT}}/v1",
        "repro --router http://localhost:$(cat /run/router.port)/v1",  # was refused as port 80
        "repro --router http://localhost:`cat /run/router.port`/v1",  # was refused as port 80
        "repro --router http://$ROUTER_HOST:30009",
    ],
)
def test_a_url_whose_host_or_port_the_shell_fills_in_is_not_judged(tmp_path: Path, command: str) -> None:
    plan(tmp_path, command)


def test_the_hint_gives_the_allow_urls_line_to_paste_for_a_meant_server(tmp_path: Path) -> None:
    err = refused(tmp_path, "repro {router_url} && curl --data-binary @m http://localhost:9091/metrics/job/orch")
    assert err.hint is not None and 'repro.allow_urls: ["http://localhost:9091"]' in err.hint
    assert "pushgateway" in err.hint and "SSH tunnel" in err.hint
    plan(
        tmp_path,
        "repro {router_url} && curl --data-binary @m http://localhost:9091/metrics/job/orch",
        extra='  allow_urls: ["http://localhost:9091"]\n',
    )


@pytest.mark.parametrize(
    ("command", "written"),
    [
        ("python3 -m sglang.bench_serving --backend sglang --host 127.0.0.1 --port 30009", "127.0.0.1 --port 30009"),
        ("python3 -m sglang.bench_serving --host=localhost --port=30009 | tee out", "localhost --port 30009"),
        ("warm {router_url} && bench --port 30009 --host ::1", "::1 --port 30009"),
    ],
)
def test_a_server_named_by_host_and_port_flags_is_judged_like_its_url(
    tmp_path: Path, command: str, written: str
) -> None:
    """sglang.bench_serving's usual form names no URL: a typo'd port there was never judged."""
    err = refused(tmp_path, command)
    assert (err.line, err.path) == (COMMAND_LINE, "repro.command")
    assert f"--host {written} is none of the servers of testbed 'local'" in str(err)
    assert err.hint is not None and "--base-url {router_url}" in err.hint and "repro.allow_urls" in err.hint


@pytest.mark.parametrize(
    "command",
    [
        "python3 -m sglang.bench_serving --host 127.0.0.1 --port 30001",  # the router's port
        "bench --host 127.0.0.1 --port $PORT",  # not literal
        "mock --host 0.0.0.0 --port 9999 & bench --base-url {router_url}",  # a listener the repro starts
        "mock --port 9999 && bench --host 127.0.0.1 --port 30001",  # each command on its own
        "bench --host 127.0.0.1; other --port 30009",
        "bench --host 10.9.9.9 --port 30009",  # not an inventory host
        "echo 'an open quote",
    ],
)
def test_host_and_port_flags_that_name_orchs_server_or_none_pass(tmp_path: Path, command: str) -> None:
    plan(tmp_path, command)


def test_a_loopback_url_inside_a_quoted_json_payload_is_judged_too(tmp_path: Path) -> None:
    payload = """curl -d '{{\\"callback\\": \\"http://127.0.0.1:9\\"}}' {router_url}/generate"""
    assert "http://127.0.0.1:9 is none of the servers" in str(refused(tmp_path, payload))


def test_the_warmup_is_judged_at_its_own_line(tmp_path: Path) -> None:
    err = refused(tmp_path, "repro {router_url}", extra='  warmup: "repro --router http://127.0.0.1:30011"\n')
    assert (err.line, err.path) == (11, "repro.warmup")


def test_a_client_factors_level_that_is_a_stray_url_is_refused(tmp_path: Path) -> None:
    matrix_extra = '  target:\n    kind: client\n    levels: ["{router}", "http://127.0.0.1:30011"]\n'.replace(
        "{router}", "http://127.0.0.1:30001"
    )
    text = MATRIX.replace("COMMAND", "repro --router {target}").replace("repro:\n", matrix_extra + "repro:\n", 1)
    (tmp_path / "m.yaml").write_text(text)
    (tmp_path / "inv.yaml").write_text(LOCAL)
    with pytest.raises(ConfigError) as info:
        make_plan(read_matrix(tmp_path / "m.yaml", "m.yaml"), read_inventory(tmp_path / "inv.yaml").testbed(None))
    assert info.value.path == "factors.target.levels" and "http://127.0.0.1:30011" in str(info.value)


def test_allow_urls_lets_a_meant_server_through_and_only_that_one(tmp_path: Path) -> None:
    allow = "  allow_urls: ['http://localhost:9400/metrics']\n"
    plan(tmp_path, "repro {router_url} --exporter http://127.0.0.1:9400", extra=allow)  # loopback is loopback
    assert "http://127.0.0.1:9401" in str(refused(tmp_path, "repro --x http://127.0.0.1:9401", extra=allow))
    err = refused(tmp_path, "repro {router_url}", extra="  allow_urls: ['localhost:9400']\n")
    assert err.path == "repro.allow_urls[0]" and "not an http(s) URL" in str(err)


def test_a_metrics_endpoints_port_is_one_orch_knows(tmp_path: Path) -> None:
    command = "curl http://10.0.0.3:29000/metrics && repro {router_url}"
    assert "10.0.0.3:29000" in str(refused(tmp_path, command, REMOTE))
    plan(tmp_path, command, REMOTE, extra="metrics:\n  endpoints: {router: {role: router, port: 29000}}\n")
    plan(
        tmp_path,
        "curl http://10.0.0.7:9400/m",
        REMOTE,
        extra="metrics:\n  endpoints: {g: {url: 'http://10.0.0.7:9400/m'}}\n",
    )


def test_on_real_hosts_a_url_is_judged_by_that_hosts_ports(tmp_path: Path) -> None:
    plan(tmp_path, "repro --router http://10.0.0.3:30001 --decode http://gpu-decode:30002", REMOTE)
    assert "gpu-decode:30009" in str(refused(tmp_path, "repro --x http://gpu-decode:30009", REMOTE))  # its SSH host
    err = refused(tmp_path, "repro --router http://10.0.0.2:30001", REMOTE)  # the router's port, on prefill's host
    assert "on inventory host 10.0.0.2 orch knows ports 30000" in str(err)
    plan(tmp_path, "repro --router http://10.0.0.9:30001", REMOTE)  # not an inventory host: not judged
    assert "127.0.0.1:30005" in str(refused(tmp_path, "repro --router http://127.0.0.1:30005", REMOTE))


def test_a_url_with_no_valid_port_is_said_to_have_none(tmp_path: Path) -> None:
    err = str(refused(tmp_path, "repro --router http://127.0.0.1:99999"))
    assert "whatever answers its invalid port would serve the repro" in err and "None" not in err


def test_a_url_without_a_port_is_the_schemes_port(tmp_path: Path) -> None:
    on_80 = LOCAL.replace("url: http://127.0.0.1:30001", "url: http://127.0.0.1:80")
    plan(tmp_path, "repro --router http://127.0.0.1/v1", on_80)  # port 80, the router's
    assert "https://localhost" in str(refused(tmp_path, "repro --router https://localhost/v1", on_80))  # 443


def test_run_refuses_it_with_exit_2_before_touching_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "m.yaml").write_text(MATRIX.replace("COMMAND", "repro --router http://127.0.0.1:30009"))
    (tmp_path / "inv.yaml").write_text(LOCAL)
    env = {name: f"# {name}\nX=1\n" for name in ("p.env", "d.env", "r.env")}
    for name, text in env.items():
        (tmp_path / name).write_text(text)
    reports = tmp_path / "reports"
    code = main(["run", str(tmp_path / "m.yaml"), "-i", str(tmp_path / "inv.yaml"), "--out", str(reports)])
    assert code == 2
    err = capsys.readouterr().err
    assert "m.yaml:7: repro.command: http://127.0.0.1:30009 is none of the servers" in err
    assert not reports.exists()
    assert {name: (tmp_path / name).read_text() for name in env} == env


def test_literal_urls_are_found_as_shell_and_json_write_them() -> None:
    text = """a http://127.0.0.1:1/x,"http://[::1]:2" 'https://h.example' (http://localhost:3) http://{h}:4 http://:5"""
    assert list(origins(text)) == [
        Origin("http://127.0.0.1:1", LOOPBACK, 1),
        Origin("http://[::1]:2", LOOPBACK, 2),
        Origin("https://h.example", "h.example", 443),
        Origin("http://localhost:3", LOOPBACK, 3),
    ]
    assert [canonical_host(h) for h in ("10.0.0.4", "GPU1.", "::2", "127.9.9.9")] == [
        "10.0.0.4",
        "gpu1",
        "::2",
        LOOPBACK,
    ]


@pytest.mark.parametrize(
    "host", ["127.1", "127.0.1", "2130706433", "0x7F000001", "0X7f.1", "017700000001", "0", "a.b.LOCALHOST."]
)
def test_every_way_the_resolver_reads_loopback_is_loopback(host: str) -> None:
    assert canonical_host(host) == LOOPBACK


@pytest.mark.parametrize(
    ("host", "compared"),
    [
        ("10.1", "10.0.0.1"),  # a shorthand, but not this machine
        ("1.2.3", "1.2.0.3"),
        ("0x0A.0.0.1", "10.0.0.1"),
        ("::FFFF:10.0.0.1", "10.0.0.1"),
        ("2001:0DB8::0002", "2001:db8::2"),
        ("10.0.0.4", "10.0.0.4"),
    ],
)
def test_an_address_compares_in_one_form_however_it_is_written(host: str, compared: str) -> None:
    assert canonical_host(host) == compared


@pytest.mark.parametrize("written", ["2001:db8::2", "[2001:db8::2]", "2001:DB8:0::2"])
def test_an_ipv6_ssh_host_is_judged_however_the_inventory_writes_it(tmp_path: Path, written: str) -> None:
    inventory = REMOTE.replace("ssh: {host: 10.0.0.2, user: sglang}", f'ssh: {{host: "{written}", user: sglang}}')
    assert "inventory host 2001:db8::2" in str(refused(tmp_path, "repro --x http://[2001:db8::2]:30009", inventory))


def test_a_url_to_an_inventory_host_written_another_way_is_judged_by_that_hosts_ports(tmp_path: Path) -> None:
    err = refused(tmp_path, "repro --router http://0x0a.0.0.2:30009", REMOTE)
    assert "inventory host 10.0.0.2" in str(err) and "none of the servers of testbed 'pd'" in str(err)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1.example",  # a name that starts like an address
        "127.0.0.1x",
        "127.0.0.1 x",  # inet_aton reads the address and ignores the rest; a resolver does not
        "10.1\tx",
        "0x7f000001g",
        "08.0.0.1",  # not octal: inet_aton refuses it, so no address at all
        "localhost.example",
        "mylocalhost",
        "",
    ],
)
def test_names_and_other_addresses_stay_as_written(host: str) -> None:
    assert canonical_host(host) == host.lower().rstrip(".")
