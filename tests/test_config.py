"""Config errors: every bad matrix or inventory gives exit 2, file:line, the key path and a hint,
never a traceback. The corpus below is the contract for what users see."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.core.config import read_inventory, read_matrix
from orchestrator.errors import ConfigError

GOOD = """\
name: demo
factors:
  overlap:
    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}
    levels: [on, off]
  cuda_graph:
    levels:
      on: {decode: {SGLANG_EXTRA_ARGS: ""}}
      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}
repro:
  command: "{python} -m orchestrator.sim.repro --router {router_url} --sessions 4"
  timeout: 60
  metrics:
    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}
"""

INVENTORY = """\
testbeds:
  local:
    hosts:
      prefill:
        env_file: p.env
        units: [{name: p, command: ["true"]}]
      decode:
        env_file: d.env
        units: [{name: d, command: ["true"]}]
      router:
        env_file: r.env
        units: [{name: r, command: ["true"]}]
        after: [prefill, decode]
"""


def run_validate(tmp_path: Path, matrix_text: str, inventory_text: str = INVENTORY, capsys=None):
    (tmp_path / "m.yaml").write_text(matrix_text)
    (tmp_path / "inv.yaml").write_text(inventory_text)
    return main(["validate", str(tmp_path / "m.yaml"), "-i", str(tmp_path / "inv.yaml")])


def test_good_matrix_validates(tmp_path, capsys):
    assert run_validate(tmp_path, GOOD) == 0
    assert "2 factors, 4 cells, 4 trials" in capsys.readouterr().out


def test_one_factor_is_counted_in_the_singular(tmp_path, capsys):
    one = GOOD.replace('  cuda_graph:\n    levels:\n      on: {decode: {SGLANG_EXTRA_ARGS: ""}}\n', "")
    one = one.replace('      off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}\n', "")
    assert run_validate(tmp_path, one + "replicates: 1\n") == 0
    assert ": ok — 1 factor, 2 cells, 2 trials" in capsys.readouterr().out  # was "1 factors"


# (description, matrix text transform, expected substrings in the one-line error)
WALL = "    wall: {regex: 'wall=(?P<value>[0-9.]+)s', unit: %s}\n"

MATRIX_CASES = [
    (
        "a metric's unit of a sentence",
        lambda t: t + WALL % "seconds of wall time per trial",
        ["m.yaml:15", "repro.metrics.wall.unit", "30 characters is more than 16", "such as s, ms"],
    ),
    (
        "a metric's unit with a terminal escape",
        lambda t: t + WALL % '"\\e[31ms"',
        ["m.yaml:15", "repro.metrics.wall.unit", "control or invisible character U+001B"],
    ),
    (
        "a collector's unit with a newline",
        lambda t: t + 'collect:\n  errors: {role: decode, pattern: ERROR, unit: "per\\ntrial"}\n',
        ["m.yaml:16", "collect.errors.unit", "control or invisible character U+000A"],
    ),
    ("malformed yaml", lambda t: t + "  bad: [unclosed\n", ["m.yaml:", "invalid YAML"]),
    (
        "tab indentation",
        lambda t: t.replace("  overlap:", "\toverlap:"),
        ["m.yaml:3", "invalid YAML", "indent with spaces: YAML does not allow a tab there"],
    ),
    ("two documents", lambda t: t + "---\nname: x\n", ["expected one YAML mapping, found 2 documents"]),
    ("empty file", lambda t: "", ["found no document"]),
    ("top-level list", lambda t: "- a\n- b\n", ["expected a mapping at the top level"]),
    (
        "unknown top key",
        lambda t: t + "replicate: 3\n",
        ["m.yaml:15", "unknown key 'replicate'", "did you mean 'replicates'?"],
    ),
    (
        "unknown factor key",
        lambda t: t.replace("    levels: [on, off]", "    level: [on, off]"),
        ["m.yaml:5", "factors.overlap.level", "did you mean 'levels'?"],
    ),
    (
        "unknown repro key",
        lambda t: t.replace("  timeout: 60", "  timeout_s: 60"),
        ["m.yaml:12", "repro.timeout_s", "did you mean 'timeout'?"],
    ),
    (
        "unknown metric key",
        lambda t: t.replace("kind: proportion", "knd: proportion"),
        ["repro.metrics.corruption.knd", "did you mean 'kind'?"],
    ),
    ("missing name", lambda t: t.replace("name: demo\n", ""), ["missing required key 'name'"]),
    ("missing repro", lambda t: t[: t.index("repro:")], ["missing required key 'repro'"]),
    ("missing metrics", lambda t: t[: t.index("  metrics:")], ["repro: missing required key 'metrics'"]),
    (
        "levels scalar",
        lambda t: t.replace("levels: [on, off]", "levels: on"),
        ["m.yaml:5", "factors.overlap.levels", "expected a list", "got 'on'", "write a list such as [on, ...]"],
    ),
    (
        "one level",
        lambda t: t.replace("levels: [on, off]", "levels: [on]"),
        ["m.yaml:5", "at least 2 levels, got 1", "a setting every trial shares goes in the host's env file"],
    ),
    ("empty levels", lambda t: t.replace("levels: [on, off]", "levels: []"), ["at least 2 levels, got 0"]),
    ("duplicate level", lambda t: t.replace("levels: [on, off]", "levels: [on, on]"), ["duplicate level 'on'"]),
    (
        "two levels YAML reads as one value",
        lambda t: t.replace("levels: [on, off]", "levels: [on, yes]"),
        ["m.yaml:5", "factors.overlap.levels[1]", "level 'yes' sets what level 'on' sets", "give each level"],
    ),
    (
        "a copy-pasted full-form level",
        lambda t: t.replace('"--disable-cuda-graph"', '""'),
        ["m.yaml:9", "factors.cuda_graph.levels.off", "level 'off' sets what level 'on' sets"],
    ),
    (
        "duplicate factor",
        lambda t: t.replace("  cuda_graph:", "  overlap:"),
        ["m.yaml:6", "duplicate key 'overlap' (first defined on line 3)"],
    ),
    (
        "no factors",
        lambda t: t.replace(t[t.index("factors:") : t.index("repro:")], "factors: {}\n"),
        ["factors", "must not be empty"],
    ),
    (
        "factors a list",
        lambda t: t.replace(t[t.index("factors:") : t.index("repro:")], "factors: [a, b]\n"),
        ["factors", "expected a mapping"],
    ),
    (
        "short form without env",
        lambda t: t.replace("    env: {decode: SGLANG_OPT_USE_MULTI_STREAM_OVERLAP}\n", ""),
        ["factors.overlap", "need `env:`"],
    ),
    (
        "env with full form",
        lambda t: t.replace("  cuda_graph:\n", "  cuda_graph:\n    env: {decode: X}\n"),
        ["factors.cuda_graph.env", "only for the short form"],
    ),
    (
        "invalid env name",
        lambda t: t.replace("SGLANG_OPT_USE_MULTI_STREAM_OVERLAP", "SGLANG-OVERLAP"),
        ["m.yaml:4", "invalid environment variable name 'SGLANG-OVERLAP'"],
    ),
    (
        "env name with space",
        lambda t: t.replace('SGLANG_EXTRA_ARGS: ""', "'BAD NAME': x"),
        ["invalid environment variable name 'BAD NAME'"],
    ),
    (
        "non-scalar value",
        lambda t: t.replace('SGLANG_EXTRA_ARGS: ""', "SGLANG_EXTRA_ARGS: [a, b]"),
        ["m.yaml:8", "factors.cuda_graph.levels.on.decode.SGLANG_EXTRA_ARGS"],
    ),
    (
        "mapping value",
        lambda t: t.replace('SGLANG_EXTRA_ARGS: ""', "SGLANG_EXTRA_ARGS: {a: 1}"),
        ["factors.cuda_graph.levels.on.decode.SGLANG_EXTRA_ARGS"],
    ),
    (
        "newline in value",
        lambda t: t.replace('SGLANG_EXTRA_ARGS: ""', 'SGLANG_EXTRA_ARGS: "a\\nb"'),
        ["m.yaml:8", "NUL or line break"],
    ),
    ("NUL in value", lambda t: t.replace('SGLANG_EXTRA_ARGS: ""', 'SGLANG_EXTRA_ARGS: "a\\0b"'), ["NUL or line break"]),
    (
        "same var in two factors",
        lambda t: t.replace("SGLANG_EXTRA_ARGS", "SGLANG_OPT_USE_MULTI_STREAM_OVERLAP"),
        ["decode:SGLANG_OPT_USE_MULTI_STREAM_OVERLAP is also set by factor 'overlap'"],
    ),
    (
        "exclude unknown factor",
        lambda t: t + "exclude: [{overlp: on}]\n",
        ["m.yaml:15", "exclude[0].overlp", "'overlp' is not a declared factor", "did you mean 'overlap'?"],
    ),
    (
        "exclude unknown level",
        lambda t: t + "exclude: [{overlap: maybe}]\n",
        ["exclude[0].overlap", "'maybe' is not a level of 'overlap'"],
    ),
    ("exclude empty entry", lambda t: t + "exclude: [{}]\n", ["exclude[0]", "would exclude every cell"]),
    ("exclude everything", lambda t: t + "exclude: [{overlap: on}, {overlap: off}]\n", ["every cell is excluded"]),
    ("include partial", lambda t: t + "include: [{overlap: on}]\n", ["include[0]", "missing: cuda_graph"]),
    ("baseline unknown factor", lambda t: t + "baseline: {cuda: on}\n", ["baseline.cuda", "not a declared factor"]),
    (
        "baseline unknown level",
        lambda t: t + "baseline: {overlap: yes}\n",
        ["baseline.overlap", "'yes' is not a level"],
    ),
    (
        "zip unknown factor",
        lambda t: t + "zips: [[overlap, nope]]\n",
        ["zips[0][1]", "'nope' is not a declared factor"],
    ),
    ("zip of one", lambda t: t + "zips: [[overlap]]\n", ["zips[0]", "at least two factors"]),
    (
        "zip size mismatch",
        lambda t: (
            t.replace(
                'off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}',
                'off: {decode: {SGLANG_EXTRA_ARGS: "--disable-cuda-graph"}}\n'
                '      x: {decode: {SGLANG_EXTRA_ARGS: "-x"}}',
            )
            + "zips: [[overlap, cuda_graph]]\n"
        ),
        ["same number of levels (overlap=2, cuda_graph=3)"],
    ),
    ("replicates zero", lambda t: t + "replicates: 0\n", ["m.yaml:15", "replicates", "must be >= 1"]),
    ("replicates text", lambda t: t + "replicates: many\n", ["replicates", "expected an integer", "got 'many'"]),
    (
        "bad order",
        lambda t: t + "order: shuffled\n",
        ["order", "expected 'randomized', 'sequential' or 'min-restarts', got 'shuffled'"],
    ),
    ("timeout negative", lambda t: t.replace("timeout: 60", "timeout: -5"), ["repro.timeout", "must be > 0"]),
    (
        "bad regex",
        lambda t: t.replace("(?P<k>\\d+)/", "(?P<k>\\d+/"),
        ["repro.metrics.corruption.regex", "invalid regular expression"],
    ),
    (
        "proportion without groups",
        lambda t: t.replace("(?P<k>\\d+)/(?P<n>\\d+)", "(\\d+)/(\\d+)"),
        ["needs named groups (?P<k>...) and (?P<n>...)"],
    ),
    (
        "bad metric kind",
        lambda t: t.replace("kind: proportion", "kind: ratio"),
        ["repro.metrics.corruption.kind", "expected 'proportion' or 'number'"],
    ),
    (
        "undefined placeholder",
        lambda t: t.replace("{router_url}", "{routr_url}"),
        ["m.yaml:11", "repro.command", "undefined placeholder {routr_url}", "did you mean {router_url}?"],
    ),
    (
        "bad placeholder syntax",
        lambda t: t.replace("{router_url}", "{router_url"),
        ["repro.command", "bad placeholder syntax"],
    ),
    (
        "undefined role",
        lambda t: t.replace("env: {decode: SGLANG", "env: {decoder: SGLANG"),
        ["factors.overlap", "role 'decoder' is not in the inventory"],
    ),
    (
        "mistyped role",  # the inventory's closest role is offered, as for a factor or placeholder
        lambda t: t.replace("env: {decode: SGLANG", "env: {decod: SGLANG"),
        ["factors.overlap", "role 'decod' is not in the inventory", "did you mean 'decode'?", "prefill, decode"],
    ),
    (
        "mistyped role of a collector",
        lambda t: t + "collect:\n  anomalies: {role: dec, pattern: ANOMALY}\n",
        ["collect.anomalies.role", "did you mean 'decode'?"],
    ),
    (
        "mistyped role of a verify rule",
        lambda t: t + "verify:\n  - {role: decoder, expect: {disable_cuda_graph: true}}\n",
        ["verify[0].role", "role 'decoder' is not in the inventory", "did you mean 'decode'?"],
    ),
    (
        "repro on unknown role",
        lambda t: t.replace("  timeout: 60", "  timeout: 60\n  on: gpu9"),
        ["repro.on", "role 'gpu9' is not in the inventory"],
    ),
    (
        "collect without source",
        lambda t: t + "collect:\n  anomalies: {role: decode}\n",
        ["collect.anomalies", "exactly one of `pattern:`"],
    ),
    (
        "collect unknown role",
        lambda t: t + "collect:\n  anomalies: {role: dec, pattern: ANOMALY}\n",
        ["collect.anomalies.role", "role 'dec' is not in the inventory"],
    ),
    (
        "health timeout unknown role",
        lambda t: t + "health_timeouts: {gpu: 5}\n",
        ["health_timeouts.gpu", "not in the inventory"],
    ),
    ("merge keys", lambda t: t + "x: &a {b: 1}\ny:\n  <<: *a\n", ["merge keys"]),
    (
        "shell metacharacters in factor name",
        lambda t: t.replace("  overlap:", "  'over;lap':"),
        ["invalid factor name 'over;lap'"],
    ),
    (
        "level name with comma",
        lambda t: t.replace("levels: [on, off]", "levels: ['a,b', c]"),
        ["invalid level name 'a,b'"],
    ),
]


@pytest.mark.parametrize("name,transform,expected", MATRIX_CASES, ids=[c[0] for c in MATRIX_CASES])
def test_bad_matrix(tmp_path, capsys, name, transform, expected):
    code = run_validate(tmp_path, transform(GOOD))
    captured = capsys.readouterr()
    assert code == 2, captured
    message = captured.err
    assert "Traceback" not in message
    assert "m.yaml" in message
    for part in expected:
        assert part in " ".join(message.split()), f"{part!r} not in {message!r}"


INVENTORY_CASES = [
    ("no testbeds", "testbeds: {}\n", ["testbeds", "must not be empty"]),
    (
        "unknown host key",
        INVENTORY.replace("env_file: p.env", "env_fle: p.env"),
        ["inv.yaml:5", "testbeds.local.hosts.prefill.env_fle", "did you mean 'env_file'?"],
    ),
    (
        "bad transport",
        INVENTORY.replace("env_file: p.env", "env_file: p.env\n        transport: telnet"),
        ["transport", "expected 'local' or 'ssh'"],
    ),
    (
        "ssh without settings",
        INVENTORY.replace("env_file: d.env", "env_file: /etc/d.env\n        transport: ssh"),
        ["testbeds.local.hosts.decode", "needs an `ssh:` mapping"],
    ),
    (
        "remote relative env file",
        INVENTORY.replace("env_file: d.env", "env_file: d.env\n        transport: ssh\n        ssh: {host: h}"),
        ["env_file", "must be an absolute path"],
    ),
    (
        "after unknown role",
        INVENTORY.replace("after: [prefill, decode]", "after: [prefill, decod]"),
        ["inv.yaml:13", "unknown role 'decod'"],
    ),
    (
        "restart cycle",
        INVENTORY.replace(
            'units: [{name: p, command: ["true"]}]', 'units: [{name: p, command: ["true"]}]\n        after: [router]'
        ),
        ["restart order has a cycle"],
    ),
    (
        "local unit without command",
        INVENTORY.replace('units: [{name: d, command: ["true"]}]', "units: [d]"),
        ["units[0]", "a local unit needs a `command:`"],
    ),
    ("bad unit name", INVENTORY.replace("name: d,", "name: 'd;rm -rf /',"), ["invalid unit name"]),
    (
        "bad health url",
        INVENTORY.replace("env_file: r.env", "env_file: r.env\n        health: localhost:30001"),
        ["health", "not an http(s) URL"],
    ),
    (
        "ssh port out of range",
        INVENTORY.replace(
            "env_file: d.env", "env_file: /d.env\n        transport: ssh\n        ssh: {host: h, port: 70000}"
        ),
        ["ssh.port", "must be <= 65535"],
    ),
    (
        "role without default port",
        INVENTORY.replace(
            "  local:\n    hosts:\n",
            "  local:\n    hosts:\n      gpu:\n        env_file: g.env\n        units: [{name: g, command: [x]}]\n",
        ),
        ["role 'gpu' has no default port"],
    ),
]


@pytest.mark.parametrize("name,inventory,expected", INVENTORY_CASES, ids=[c[0] for c in INVENTORY_CASES])
def test_bad_inventory(tmp_path, capsys, name, inventory, expected):
    code = run_validate(tmp_path, GOOD, inventory)
    message = capsys.readouterr().err
    assert code == 2 and "Traceback" not in message
    for part in expected:
        assert part in " ".join(message.split()), f"{part!r} not in {message!r}"


def test_exact_message_for_scalar_levels(tmp_path):
    (tmp_path / "x.yaml").write_text(GOOD.replace("levels: [on, off]", "levels: on"))
    with pytest.raises(ConfigError) as e:
        read_matrix(tmp_path / "x.yaml", "matrices/x.yaml")
    assert str(e.value) == (
        "matrices/x.yaml:5: factors.overlap.levels: expected a list, got 'on' "
        "(write a list such as [on, ...] with at least two levels)"
    )


METRICS_LINE = "    corruption: {kind: proportion, regex: 'CORRUPTION sessions: (?P<k>\\d+)/(?P<n>\\d+)'}\n"
HOW_TO_DECLARE = "declare what to read from the repro's output, e.g. metrics: {corruption: {kind: proportion, regex: "


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda t: t.replace("  metrics:\n" + METRICS_LINE, "  metrics: {}\n"),
            "matrices/x.yaml:13: repro.metrics: must not be empty (" + HOW_TO_DECLARE,
        ),
        (
            lambda t: t.replace("  metrics:\n" + METRICS_LINE, ""),
            "matrices/x.yaml:10: repro: missing required key 'metrics' (",
        ),
    ],
    ids=["empty", "missing"],
)
def test_a_repro_without_metrics_is_told_how_to_declare_one(tmp_path, edit, expected):
    """A first matrix often has no metrics yet; the message said 'must not be empty, got a
    mapping' (the mapping was the empty one) or only that the key was missing."""
    text = edit(GOOD)
    assert text != GOOD
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(ConfigError) as e:
        read_matrix(tmp_path / "x.yaml", "matrices/x.yaml")
    assert str(e.value).startswith(expected), str(e.value)
    assert HOW_TO_DECLARE in str(e.value) and "got a mapping" not in str(e.value)


def test_yaml_booleans_never_reach_env_files_as_python_booleans(tmp_path):
    text = GOOD.replace("levels: [on, off]", "levels: [yes, no]") + "\n"
    (tmp_path / "m.yaml").write_text(text)
    m = read_matrix(tmp_path / "m.yaml")
    values = [v for lv in m.factor("overlap").levels for v in lv.env["decode"].values()]
    assert values == ["1", "0"]
    assert m.factor("overlap").level_names == ("yes", "no")


def test_quoted_on_stays_a_string_and_numbers_keep_their_text(tmp_path):
    text = GOOD.replace('SGLANG_EXTRA_ARGS: ""', 'SGLANG_EXTRA_ARGS: "on"').replace('"--disable-cuda-graph"', "0.10")
    (tmp_path / "m.yaml").write_text(text)
    m = read_matrix(tmp_path / "m.yaml")
    assert m.factor("cuda_graph").level("on").env == {"decode": {"SGLANG_EXTRA_ARGS": "on"}}
    assert m.factor("cuda_graph").level("off").env == {"decode": {"SGLANG_EXTRA_ARGS": "0.10"}}


def test_null_value_removes_the_variable(tmp_path):
    (tmp_path / "m.yaml").write_text(GOOD.replace('SGLANG_EXTRA_ARGS: ""', "SGLANG_EXTRA_ARGS: null"))
    m = read_matrix(tmp_path / "m.yaml")
    assert m.factor("cuda_graph").level("on").env == {"decode": {"SGLANG_EXTRA_ARGS": None}}


def test_inventory_defaults(tmp_path):
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    tb = read_inventory(tmp_path / "inv.yaml").testbed(None)
    assert tb.hosts["prefill"].health == "http://127.0.0.1:30000/health"
    assert tb.hosts["decode"].health == "http://127.0.0.1:30002/health"
    assert tb.hosts["router"].health == "http://127.0.0.1:30001/readiness"
    assert tb.hosts["prefill"].env_file == str(tmp_path / "p.env")
    assert tb.hosts["router"].after == ("prefill", "decode")


def test_shipped_files_validate(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    for matrix in sorted((repo / "matrices").glob("*.yaml")):
        assert main(["validate", str(matrix)]) == 0, capsys.readouterr().err
    assert main(["validate", "matrices/overlap_ablation.yaml", "-i", "inventory/example-pd.yaml"]) == 0


def test_unknown_testbed(tmp_path, capsys):
    (tmp_path / "m.yaml").write_text(GOOD)
    (tmp_path / "inv.yaml").write_text(INVENTORY)
    assert main(["validate", str(tmp_path / "m.yaml"), "-i", str(tmp_path / "inv.yaml"), "-t", "nope"]) == 2
    assert "no testbed named 'nope'" in capsys.readouterr().err


def test_an_unknown_testbed_among_many_names_the_close_ones_and_a_bounded_list():
    """A typo among 200 testbeds: the hint led with all 200 names (2 KB on one line) and no
    suggestion; it names the close ones first and at most a few others, with the count."""
    from orchestrator.core.inventory import Inventory

    names = [f"gpu-node-{i:03d}" for i in range(200)]
    inventory = Inventory(dict.fromkeys(names), "inv.yaml", "")  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as caught:
        inventory.testbed("gpu-nod-042")
    hint = caught.value.hint or ""
    assert hint.startswith("did you mean 'gpu-node-042'"), hint
    assert "200 testbeds" in hint and len(hint) < 300, hint
    with pytest.raises(ConfigError) as caught:
        Inventory(dict.fromkeys(["a", "b"]), "inv.yaml", "").testbed("zzz")  # type: ignore[arg-type]
    assert caught.value.hint == "known: a, b"


def test_missing_matrix_file(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_corpus_is_large_enough():
    assert len(MATRIX_CASES) + len(INVENTORY_CASES) >= 40
