"""Benchmark: seeded random mutants of orch's inputs; does bad input always get a clear error?

orch promises: bad input gets a clear error naming file and line, exit code 2, nothing on any host
touched; no input, however large, deep or slow to match, hangs orch or exhausts its memory. The
hand-picked cases (tests/test_bad_input*.py, tests/faults/test_hostile_input.py) hold it for the
inputs someone thought of; this throws seeded random ones at it.

Each seed makes one mutant: a shipped matrix (matrices/*.yaml), a shipped inventory
(inventory/local.yaml, example-pd.yaml) or one file of a finished run's folder (run.json,
journal.jsonl, status.json) changed by one mutation kind (seed % number of kinds: every kind gets
its share) - lines deleted, duplicated, swapped or re-indented, a scalar's type swapped, huge,
edge and long values, control characters, NUL, invalid UTF-8, a BOM, CRLF, tabs, anchors, aliases
and merge keys, tags, deep nesting, duplicate keys, confusable env names, regex metacharacters in
metric patterns, a truncated or empty file. A YAML mutant goes through `orch validate`, `orch plan`
and `orch run --dry-run`; a run folder's through `orch report` and `orch status` (plain and
--json).

Later targets (families, --targets): `folder` (the run's plan.json, summary.json) and `hunt` (an
interrupted hunt's journal, hunt-handed.json, plan.json), whose mutants also go through `orch
export`, `orch compare` (the mutated copy as A or B) and, for a hunt, `orch resume --dry-run` and
`orch hunt M --resume --dry-run` (`run` gets export and compare too); `queue` (a matrix given to `orch
queue add`, then `orch queue list`); `queuedb` (a queue.db, or a SQLite file of another schema, its
bytes mutated, under `orch queue list` and `orch status`); `serve` (a route's URL made hostile:
traversal, plain and encoded, symlinks out of reports/, huge queries, NUL, bad UTF-8, a run folder
named in odd bytes; one request to `orch serve`'s own server over a socket pair: 4xx or 2xx, never
5xx, never a byte of the file planted outside reports/). A seed draws among the families given (all
by default; `--targets matrix,inventory,run` draws what the bench drew before these existed).

Each command runs in a forked child of this process (the imports paid once; the child's
peak RSS and CPU time measured, killed past --kill-after wall seconds or 1 GB), with connect() and
process starts refused and recorded; --in-process calls main() here instead (no RSS; the unit
tier's way). The time limit is CPU time: on a shared machine a load of 10 stretches a 1.6 s plan
past 5 s of wall time; a hang spends no CPU and is caught by the wall-clock kill.

A result is ok (exit 0; exit 2 naming the file and a line) or BAD: a traceback, another exit code,
exit 2 without file:line, over --max-seconds of CPU, over --max-mb of RSS, a host touched (a connection,
a process started, the inventory's folder changed). Prints a tally by mutation kind and every BAD
case with its seed (`--only SEED` replays it, printing the mutant's diff and the output).

    nice python bench/bench_fuzz_inputs.py [--n 3000] [--seed 0] [--only SEED] [--in-process] [--targets serve,hunt]

Measured: see bench/README.md ("bench_fuzz_inputs.py").
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the synthetic run the report tests use

from timing import load_line  # noqa: E402

MATRICES = sorted(p.name for p in (REPO / "matrices").glob("*.yaml"))
INVENTORIES = ("local.yaml", "example-pd.yaml")
RUN_FILES = ("run.json", "journal.jsonl", "status.json")
FOLDER_FILES = ("plan.json", "summary.json")  # the finished run's other files ("folder:" targets)
HUNT_FILES = ("journal.jsonl", "hunt-handed.json", "plan.json")  # an interrupted hunt's ("hunt:" targets)
QUEUED = ("overlap_ablation.yaml", "dsv4_hunt.yaml")  # matrices given to `orch queue add` ("queue:" targets)
RUN_ID = "20260509-070000-overlap_ablation"
HUNT_ID = "20261205-000000-small_hunt"
ODD_ID = os.fsdecode(b"20260509-070001-odd \xff\x01%2e\xe5\x90\x8d;'<x>")  # a run folder named with odd bytes
SECRET = "FUZZ-SECRET-OUTSIDE-REPORTS"  # in a file beside reports/: a page holding it served a file outside
YAML_FAMILIES = ("matrix", "inventory", "queue")
JSON_FAMILIES = ("run", "folder", "hunt")
OLD_FAMILIES = ("matrix", "inventory", "run")  # what the bench mutated before serve, the queue and the hunt
# a target's weight (the old three's as before: their seeds draw what they drew); serve has 10 URLs
WEIGHTS = {"matrix": 3, "inventory": 2, "run": 2, "folder": 2, "hunt": 2, "queue": 2, "queuedb": 2, "serve": 0.6}


# ---------------------------------------------------------------- mutations (text -> text)

Mutate = Callable[[random.Random, str, bool], str]  # (rng, text, is_json) -> mutant text


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True) or [""]


def _pick_line(rng: random.Random, lines: list[str], pattern: str = r"\S") -> int:
    hits = [i for i, line in enumerate(lines) if re.search(pattern, line)]
    return rng.choice(hits) if hits else rng.randrange(len(lines))


def delete_line(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    for _ in range(rng.choice((1, 1, 2, 3))):
        if len(lines) > 1:
            del lines[_pick_line(rng, lines)]
    return "".join(lines)


def duplicate_line(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    i = _pick_line(rng, lines)
    lines[i:i] = [lines[i]] * rng.choice((1, 1, 2, 50))
    return "".join(lines)


def swap_lines(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    i, j = _pick_line(rng, lines), _pick_line(rng, lines)
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


def indent(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    i = _pick_line(rng, lines, r"^\s*\S")
    body = lines[i].lstrip(" ")
    width = len(lines[i]) - len(body) + rng.choice((-4, -2, -1, 1, 2, 3, 8))
    lines[i] = " " * max(0, width) + body
    return "".join(lines)


TYPE_SWAPS = ('"text"', "7", "[a, b]", "{a: 1}", "null", "~", "true", "''", "[]", "{}", "-", "0.5", "[[1]]")
JSON_TYPES: list[object] = ["text", 7, ["a", "b"], {"a": 1}, None, True, "", [], {}, 0.5, [[1]]]
HUGE = ("1e400", "-1e400", "9" * 29, "9223372036854775808", "1" * 5000, "1" * 100, "0x" + "f" * 40)
EDGE = ("-1", "0", "-0", ".nan", ".inf", "-.inf", ".NaN", "0.0000001", "1.5", "0o17", "1_000", "-99", "2.5e-320")
JSON_HUGE: list[object] = [10**400, -(10**30), 2**63, 2**64, 1e308, float("inf"), -1e308]
JSON_EDGE: list[object] = [-1, 0, -0.0, float("nan"), float("-inf"), 1e-320, 0.5, -99, 2**31]
SCALAR_LINE = r"^(\s*(?:- )?[^\s#:][^:#]*:[ \t]+)(?![|>]\s*$)(\S[^#\n]*?)(\s+#.*)?$"


def _scalar(rng: random.Random, text: str, choices: list[str]) -> str:
    """One `key: value` line's value replaced by a choice (a value in a flow mapping, sometimes)."""
    lines = _lines(text)
    hits = [i for i, line in enumerate(lines) if re.match(SCALAR_LINE, line.rstrip("\r\n"))]
    if not hits:
        return text
    i = rng.choice(hits)
    line = lines[i].rstrip("\r\n")
    m = re.match(SCALAR_LINE, line)
    assert m is not None
    value = rng.choice(choices)
    inner = re.search(r"(\{[^{}]*?:\s*)([^,{}]+)", m.group(2)) if rng.random() < 0.4 else None
    if inner is not None:  # {a: x, b: y}: one of its values
        new = m.group(2)[: inner.start(2)] + value + m.group(2)[inner.end(2) :]
    else:
        new = value
    lines[i] = m.group(1) + new + (m.group(3) or "") + lines[i][len(line) :]
    return "".join(lines)


def _json_leaf(rng: random.Random, text: str, values: list[object]) -> str:
    """A JSON document (or, for a journal, one of its lines) with one value swapped."""
    lines = _lines(text)
    if len(lines) > 3 and all(line.startswith("{") for line in lines if line.strip()):  # JSON lines
        i = _pick_line(rng, lines)
        lines[i] = _json_leaf(rng, lines[i].rstrip("\n"), values) + "\n"
        return "".join(lines)
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    paths: list[tuple[object, object]] = []

    def walk(node: object) -> None:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in items:
            paths.append((node, key))
            walk(child)

    walk(doc)
    if not paths:
        return json.dumps(rng.choice(values))
    parent, key = rng.choice(paths)
    parent[key] = rng.choice(values)  # type: ignore[index]
    indented = "\n" in text.strip()
    return json.dumps(doc, indent=2 if indented else None) + ("\n" if text.endswith("\n") else "")


def type_swap(rng: random.Random, text: str, js: bool) -> str:
    return _json_leaf(rng, text, JSON_TYPES) if js else _scalar(rng, text, list(TYPE_SWAPS))


def huge_number(rng: random.Random, text: str, js: bool) -> str:
    return _json_leaf(rng, text, JSON_HUGE) if js else _scalar(rng, text, list(HUGE))


def edge_number(rng: random.Random, text: str, js: bool) -> str:
    return _json_leaf(rng, text, JSON_EDGE) if js else _scalar(rng, text, list(EDGE))


def long_string(rng: random.Random, text: str, js: bool) -> str:
    n = rng.choice((10_000, 100_000, 1_000_000, 5_000_000))
    s = rng.choice(("x", "ab", "é", "a b ", "{", "%s"))
    long = (s * (n // len(s)))[:n]
    return _json_leaf(rng, text, [long]) if js else _scalar(rng, text, [long, f'"{long}"'])


def _insert(rng: random.Random, text: str, chars: list[str]) -> str:
    pos = rng.randrange(len(text) + 1)
    return text[:pos] + rng.choice(chars) + text[pos:]


def control_char(rng: random.Random, text: str, js: bool) -> str:
    chars = [chr(c) for c in (*range(1, 9), 11, 12, *range(14, 32), 127)] + ["\x85", "\u2028", "\u2029", "\r"]
    return _insert(rng, text, chars)


def nul(rng: random.Random, text: str, js: bool) -> str:
    return _insert(rng, text, ["\x00", "\x00\x00", "a\x00b"])


INVALID_UTF8 = ("\udcff", "\udcc3(", "\udced\udca0\udc80", "\udcfe\udcff", "\udcc0\udcaf")  # surrogateescape bytes


def invalid_utf8(rng: random.Random, text: str, js: bool) -> str:
    return _insert(rng, text, list(INVALID_UTF8))


def bom(rng: random.Random, text: str, js: bool) -> str:
    if rng.random() < 0.6:
        return "\ufeff" + text
    return _insert(rng, text, ["\ufeff"])


def crlf(rng: random.Random, text: str, js: bool) -> str:
    ending = rng.choice(("\r\n", "\r", "\r\r\n"))
    if rng.random() < 0.5:
        return text.replace("\n", ending)
    lines = _lines(text)
    i = _pick_line(rng, lines)
    lines[i] = lines[i].rstrip("\n") + ending
    return "".join(lines)


def tabs(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    i = _pick_line(rng, lines, r"^ +\S")
    lines[i] = re.sub(r"^( {2})+", lambda m: "\t" * (len(m.group(0)) // 2), lines[i])
    return "".join(lines) if rng.random() < 0.7 else text.replace(": ", ":\t", 1)


def anchors(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    i = _pick_line(rng, lines, SCALAR_LINE)
    m = re.match(SCALAR_LINE, lines[i].rstrip("\r\n"))
    forms = [
        lambda v: f"&a {v}",  # an anchor, unused
        lambda v: "*nowhere",  # an alias to no anchor
        lambda v: "&a [*a]",  # a list holding itself
        lambda v: "&a {x: *a}",  # a map holding itself
        lambda v: "{<<: {extra: 1}, x: 1}",  # a merge key
        lambda v: "{<<: [1, 2]}",  # a merge of non-maps
        lambda v: "*a",  # an alias before its anchor
    ]
    if m is not None and rng.random() < 0.7:
        form = rng.choice(forms)
        lines[i] = m.group(1) + form(m.group(2)) + lines[i][len(lines[i].rstrip("\r\n")) :]
        return "".join(lines)
    laughs = ["x0: &x0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"]
    laughs += [f"x{k}: &x{k} [{', '.join([f'*x{k - 1}'] * 9)}]\n" for k in range(1, rng.choice((5, 9, 12)))]
    return text + "".join(laughs)  # billion laughs, appended at the top level


TAGS = (
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "!!binary aGVsbG8=",
    "!!set {a, b}",
    "!!timestamp 2001-12-14",
    "!custom x",
    "!!float abc",
    "!!int 0x",
    "!!omap [{a: 1}]",
    "!!str",
    "!<tag:yaml.org,2002:python/tuple> [1, 2]",
    "!!null x",
)


def tags(rng: random.Random, text: str, js: bool) -> str:
    return _scalar(rng, text, list(TAGS))


def deep_nesting(rng: random.Random, text: str, js: bool) -> str:
    depth = rng.choice((50, 500, 5_000, 100_000))
    shape = rng.choice(("list", "map"))
    if js:
        nested = "[" * depth + "]" * depth if shape == "list" else '{"a":' * depth + "1" + "}" * depth
        return _json_leaf(rng, text, [json.loads(nested)]) if depth < 900 else _raw_json_value(rng, text, nested)
    nested = "[" * depth + "]" * depth if shape == "list" else "{a: " * depth + "1" + "}" * depth
    return _scalar(rng, text, [nested])


def _raw_json_value(rng: random.Random, text: str, raw: str) -> str:
    """A JSON value too deep for json.dumps, put in as text after a `"key": `."""
    hits = [m.end() for m in re.finditer(r'"[^"\n]+":\s*', text)]
    if not hits:
        return raw
    pos = rng.choice(hits)
    end = re.match(r'("(?:[^"\\]|\\.)*"|[^,}\]\n]*)', text[pos:])
    return text[:pos] + raw + text[pos + (end.end() if end else 0) :]


def duplicate_key(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    key_line = r'^\s*"[^"]+":' if js else r"^\s*[^\s#:-][^:#]*:"
    i = _pick_line(rng, lines, key_line)
    copy = lines[i]
    if not copy.rstrip("\r\n").endswith((",", "{", "[")) and js:
        copy = copy.rstrip("\r\n") + ",\n"
    lines.insert(i + 1 if rng.random() < 0.5 else i, copy)
    return "".join(lines)


CONFUSABLES = {"A": "\u0410", "E": "\u0415", "O": "\u041e", "S": "\u0405", "_": "\uff3f", "I": "\u0406", "K": "\u039a"}


def confusable(rng: random.Random, text: str, js: bool) -> str:
    names = list(re.finditer(r"\b[A-Z][A-Z0-9_]{3,}\b", text)) or list(re.finditer(r"\b[a-z_]{4,}\b", text))
    if not names:
        return text
    m = rng.choice(names)
    name = m.group(0)
    k = rng.randrange(len(name))
    swap = rng.choice((CONFUSABLES.get(name[k], "\u200b" + name[k]), "\u202e" + name[k], name[k] + "\u0301"))
    return text[: m.start() + k] + swap + text[m.start() + k + 1 :]


REGEXES = (
    "(a+)+$",
    "(?P<value>(a|aa)+)+b",
    "(",
    "[",
    "(?P<value>",
    "\\",
    "(?P<value>.*)*x",
    "a{1000000}",
    "(?P<k>\\d+)(?P<k>\\d+)",
    "(?<=a+)b",
    "(?P<value>)",
    "(?P<n>\\d+)/(?P<k>\\d+)x{99999999}",
    "(?P<value>\\d+)" * 200,
    "x*" * 2000,
    "(?P<value>[0-9.]+)|(?P<value>x)",
    "(?i)(?P<value>\\d+)(?s)",
    "\\1(?P<value>a)",
)


def regex_meta(rng: random.Random, text: str, js: bool) -> str:
    lines = _lines(text)
    hits = [i for i, line in enumerate(lines) if re.search(r"regex: '", line)]
    if not hits:
        return _scalar(rng, text, [repr(r) for r in REGEXES])
    i = rng.choice(hits)
    pattern = rng.choice(REGEXES).replace("'", "''")
    lines[i] = re.sub(r"regex: '(?:[^']|'')*'", lambda _m: f"regex: '{pattern}'", lines[i], count=1)
    return "".join(lines)


def truncate(rng: random.Random, text: str, js: bool) -> str:
    return text[: rng.randrange(len(text) + 1)]


def empty(rng: random.Random, text: str, js: bool) -> str:
    return rng.choice(("", "\n", "# a comment\n", "---\n", "---\n...\n---\n", "null\n", "[]\n", "0\n", "{}\n", " "))


KINDS: dict[str, Mutate] = {
    f.__name__: f
    for f in (
        delete_line, duplicate_line, swap_lines, indent, type_swap, huge_number, edge_number, long_string,
        control_char, nul, invalid_utf8, bom, crlf, tabs, anchors, tags, deep_nesting, duplicate_key,
        confusable, regex_meta, truncate, empty,
    )
}  # fmt: skip
YAML_ONLY = {"indent", "tabs", "anchors", "tags", "confusable", "regex_meta"}
BINARY_KINDS = {"delete_line", "duplicate_line", "swap_lines", "control_char", "nul", "invalid_utf8", "bom",
                "crlf", "truncate", "empty"}  # fmt: skip  # what a SQLite file's bytes are mutated by


# ---------------------------------------------------------------- hostile URLs (serve)

Hostile = Callable[[random.Random, str], str]
HOSTILE: tuple[Hostile, ...] = (
    lambda rng, u: "/.." * rng.choice((1, 3, 40)) + "/secret.txt",  # traversal
    lambda rng, u: "/" + "%2e%2e/" * rng.choice((1, 5)) + "secret.txt",  # encoded traversal
    lambda rng, u: "/" + "%252e%252e/" * 3 + "secret.txt",  # encoded twice
    lambda rng, u: f"/{RUN_ID}/..%2f..%2fsecret.txt",
    lambda rng, u: f"/{RUN_ID}/leak.txt",  # a symlink in a run folder to the file outside
    lambda rng, u: "/leakdir/secret.txt",  # a symlinked folder in reports/ to the case's folder
    lambda rng, u: f"/{RUN_ID}/backup/",
    lambda rng, u: f"/{RUN_ID}/.hidden",
    lambda rng, u: u + "?a=" + "x" * rng.choice((10_000, 70_000, 1_000_000)),  # huge query string
    lambda rng, u: u + "?" + "&".join(f"k{i}=v" for i in range(rng.choice((1_000, 50_000)))),
    lambda rng, u: u + "?run=" + "%ff%fe%c3(" * rng.choice((1, 1000)),  # bad UTF-8 in the query
    lambda rng, u: u + rng.choice(("%00", "%00.html", "\x00", "%00/../secret.txt")),  # NUL
    lambda rng, u: u + rng.choice(("%ff", "%c3(", "\udcff", "\udced\udca0\udc80")),  # bad UTF-8 (raw: surrogates)
    lambda rng, u: u + "%0d%0aSet-Cookie:%20x=1",
    lambda rng, u: rng.choice(("//", "http://evil.example", "///", "/./")) + u.lstrip("/"),
    lambda rng, u: rng.choice(("*", "%", "%zz", "?", "#", "", "\\..\\secret.txt", "/\\..\\secret.txt")),
    lambda rng, u: "/" + "a/" * rng.choice((100, 5_000, 40_000)),  # a long or deep path
    lambda rng, u: "/" + quote(os.fsencode(ODD_ID)) + rng.choice(("/", "/index.html", "/run.json", "/summary.json")),
)


def hostile_url(kind: str, rng: random.Random, url: str) -> str:
    """A route's URL made hostile: the mutation kind's change to its text (a control character, NUL, a
    bad byte, cut...) sometimes, then, mostly, one of HOSTILE's (traversal, a huge query...)."""
    if rng.random() < 0.5:
        url = KINDS[kind](rng, url, False)
    if rng.random() < 0.8:
        url = rng.choice(HOSTILE)(rng, url)
    return url


def request_bytes(rng: random.Random, url: str) -> str:
    """The request the URL is sent in (as text, bad bytes as surrogates): GET or HEAD, a Host header,
    sometimes an odd or huge one."""
    method = rng.choice(("GET", "GET", "GET", "HEAD"))
    host = rng.choice(("127.0.0.1", "127.0.0.1", "localhost:8000", "evil.example", "127.0.0.1\x00", "h" * 70_000))
    return f"{method} {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


# ---------------------------------------------------------------- mutants


@dataclass(frozen=True)
class Mutant:
    seed: int
    kind: str
    target: str  # "matrix:<name>", "inventory:<name>" or "run:<file>"
    base: str
    text: str

    @property
    def family(self) -> str:
        return self.target.split(":", 1)[0]

    @property
    def file(self) -> str:
        """The name the mutated file has in the case's folder (its errors name it)."""
        where, name = self.target.split(":", 1)
        return {"matrix": "m.yaml", "queue": "m.yaml", "inventory": "inv.yaml", "queuedb": "queue.db"}.get(where, name)


def applies(kind: str, target: str, text: str) -> bool:
    """Whether a kind has a meaning for a target: YAML's own kinds for YAML files, byte-level ones
    for a SQLite file, any for a URL (hostile_url)."""
    family = target.split(":", 1)[0]
    if family == "serve":
        return True
    if family == "queuedb":
        return kind in BINARY_KINDS
    if kind in YAML_ONLY and family not in YAML_FAMILIES:
        return False
    return kind != "regex_meta" or "regex:" in text


def draw(seed: int, bases: dict[str, str], families: tuple[str, ...] | None = None) -> Mutant | None:
    """The mutant of `seed`: its kind by seed (each kind in turn), its target (among `families`, all
    by default) and change drawn; None when the kind means nothing for those families."""
    rng = random.Random(seed)
    kind = list(KINDS)[seed % len(KINDS)]
    targets = [t for t, text in bases.items() if applies(kind, t, text)]
    targets = [t for t in targets if families is None or t.split(":", 1)[0] in families]
    if not targets:
        return None
    target = rng.choices(targets, [WEIGHTS[t.split(":", 1)[0]] for t in targets])[0]
    text, family = bases[target], target.split(":", 1)[0]
    if family == "serve":
        return Mutant(seed, kind, target, text, request_bytes(rng, hostile_url(kind, rng, text)))
    return Mutant(seed, kind, target, text, KINDS[kind](rng, text, family in JSON_FAMILIES))


@dataclass(frozen=True)
class Bases:
    """The unmutated folders the mutants are copies of (made once, in the bench's temporary folder)."""

    run: Path  # a finished synthetic run (tests/helpers/report_synth.py), its summary.json written
    hunt: Path  # an interrupted small hunt (tests/helpers/hunt_runs.py) with its hunt-handed.json
    hunt_matrix: Path
    queue_db: Path  # a queue.db holding one item (`orch queue add`)
    other_db: Path  # a SQLite file of another schema


def base_texts(b: Bases) -> dict[str, str]:
    """Every target's unmutated text (a SQLite file's bytes as text: bad bytes kept as surrogates)."""
    bases = {f"matrix:{m}": (REPO / "matrices" / m).read_text() for m in MATRICES}
    bases |= {f"inventory:{i}": (REPO / "inventory" / i).read_text() for i in INVENTORIES}
    bases |= {f"run:{f}": (b.run / f).read_text() for f in RUN_FILES}
    bases |= {f"folder:{f}": (b.run / f).read_text() for f in FOLDER_FILES}
    bases |= {f"hunt:{f}": (b.hunt / f).read_text() for f in HUNT_FILES}
    bases |= {f"queue:{m}": (REPO / "matrices" / m).read_text() for m in QUEUED}
    bases |= {f"queuedb:{p.name}": p.read_bytes().decode("utf-8", "surrogateescape") for p in (b.queue_db, b.other_db)}
    urls = ["/", "/index.html", "/status", "/api/status", "/api/runs", f"/{RUN_ID}/", f"/{RUN_ID}/index.html",
            f"/{RUN_ID}/run.json", f"/{RUN_ID}/journal.jsonl", f"/{HUNT_ID}/hunt.html"]  # fmt: skip
    bases |= {f"serve:{u}": u for u in urls}
    return bases


def make_bases(folder: Path) -> Bases:
    """The synthetic run, the hunt, and the queue files, in `folder`."""
    from helpers.hunt_runs import hunt_run, small_hunt, truth_answer

    from orchestrator.store.hunthanded import write_handed
    from orchestrator.store.rundir import RunDir

    run_dir = make_run(folder / "reports")
    call_main(["report", str(run_dir)])  # its summary.json and index.html
    matrix = small_hunt(folder)
    hunt_dir = folder / "reports" / HUNT_ID
    records = hunt_run(hunt_dir, matrix, truth_answer(matrix), limit=12, status="interrupted")
    write_handed(RunDir.of(hunt_dir).hunt_handed, [dict(r.levels) for r in records])
    queue = folder / "queue"
    matrix_file, inventory = str(REPO / "matrices" / QUEUED[0]), str(REPO / "inventory" / "local.yaml")
    code, out, _ = call_main(["queue", "add", matrix_file, "-i", inventory, "--reports", str(queue)])
    assert code == 0, out
    other = folder / "other.db"
    with contextlib.closing(sqlite3.connect(other)) as db, db:
        db.executescript("CREATE TABLE items (id TEXT PRIMARY KEY, what BLOB); PRAGMA user_version = 99;"
                         "INSERT INTO items VALUES ('x', x'00ff'); CREATE TABLE meta (k, v);")  # fmt: skip
    return Bases(run_dir, hunt_dir, matrix.path, queue / "queue.db", other)


def make_run(folder: Path) -> Path:
    """A finished synthetic run (tests/helpers/report_synth.py): run.json, plan.json, journal.jsonl,
    and the status.json orch writes at its end."""
    from helpers.report_synth import synthetic_run, write_run

    from orchestrator.store.atomic import write_json_atomic
    from orchestrator.store.liveness import StatusFile
    from orchestrator.team.queue import Claimer

    manifest, records = synthetic_run(replicates=1, run_id=RUN_ID)
    run_dir = write_run(folder / RUN_ID, manifest, records, plan_json=True)
    me = Claimer.current()
    status = StatusFile.model_validate(
        dict(run_id=RUN_ID, name=manifest.name, testbed="local", host=me.host, pid=me.pid, pid_start=me.start,
             state="finished", started=manifest.started, updated=manifest.ended, done=8, total=8, failed=0)
    )  # fmt: skip
    write_json_atomic(run_dir / "status.json", status)
    return run_dir


def lay_out(m: Mutant, case: Path, b: Bases) -> list[tuple[str, list[str]]]:
    """The mutant's files in `case` (a private copy of everything it names); the commands to run."""
    case.mkdir(parents=True)
    raw = m.text.encode("utf-8", "surrogateescape")
    where, name = m.target.split(":", 1)
    if where in ("run", "folder", "hunt"):
        return _run_case(m, case, b, raw)
    if where == "queuedb":
        (case / "reports").mkdir()
        (case / "reports" / "queue.db").write_bytes(raw)
        reports = ["--reports", str(case / "reports")]
        return [("queue-list", ["queue", "list", *reports]), ("queue-list-all", ["queue", "list", "--all", *reports]),
                ("status", ["status", *reports]), ("status-json", ["status", "--json", *reports])]  # fmt: skip
    if where == "serve":
        return [("serve", ["__serve__", str(_serve_case(case, b)), raw.hex()])]
    shutil.copytree(REPO / "inventory" / "local", case / "local")
    if where in ("matrix", "queue"):
        matrix, inventory = case / "m.yaml", case / "local.yaml"
        matrix.write_bytes(raw)
        shutil.copy(REPO / "inventory" / "local.yaml", inventory)
    else:
        inventory = case / "inv.yaml"
        inventory.write_bytes(raw)
        pick = "overlap_ablation.yaml" if name == "example-pd.yaml" else MATRICES[m.seed // len(KINDS) % len(MATRICES)]
        matrix = case / pick
        shutil.copy(REPO / "matrices" / pick, matrix)
    common = [str(matrix), "-i", str(inventory)]
    if where == "queue":  # the reports folder made: a refused add leaves none, and list would say so
        (case / "reports").mkdir()
        reports = ["--reports", str(case / "reports")]
        return [("queue-add", ["queue", "add", *common, *reports]), ("queue-list", ["queue", "list", *reports])]
    return [("validate", ["validate", *common]), ("plan", ["plan", *common]),
            ("dry-run", ["run", *common, "--dry-run", "--out", str(case / "out")])]  # fmt: skip


def _another_id(run_id: str) -> str:
    """A run id of the same length (the copy's files keep their sizes) that differs in its first digit."""
    return ("1" if run_id[0] != "1" else "2") + run_id[1:]


def _copy_as_another_run(base: Path, to: Path) -> None:
    """A copy of the run under another run id (its files say so): `orch compare` refuses a run set
    against itself, so B must be another run, with the same cells and counts."""
    shutil.copytree(base, to)
    old, new = f'"{base.name}"'.encode(), f'"{to.name}"'.encode()
    for path in to.iterdir():
        if path.is_file():
            path.write_bytes(path.read_bytes().replace(old, new))


def _run_case(m: Mutant, case: Path, b: Bases, raw: bytes) -> list[tuple[str, list[str]]]:
    """A run folder's mutant: the run (or the hunt) copied twice into case/reports, one copy's file
    mutated; `orch compare` gets the mutated copy as A or as B (by the seed). `orch report` comes
    last: it writes summary.json anew."""
    where, name = m.target.split(":", 1)
    base = b.hunt if where == "hunt" else b.run
    reports = case / "reports"
    mutated, other = reports / base.name, reports / _another_id(base.name)
    shutil.copytree(base, mutated)
    _copy_as_another_run(base, other)
    (mutated / name).write_bytes(raw)
    a_b = [str(mutated), str(other)] if m.seed % 2 == 0 else [str(other), str(mutated)]
    fmt = ("csv", "json", "junit", "bencher")[m.seed // len(KINDS) % 4]
    commands = [("status", ["status", "--reports", str(reports)]),
                ("status-json", ["status", "--json", "--reports", str(reports)]),
                ("export", ["export", str(mutated), "--format", fmt, "-o", str(case / f"export.{fmt}")]),
                ("compare", ["compare", *a_b, "-o", str(case / "compare.html")])]  # fmt: skip
    if where == "hunt":  # an interrupted hunt: the two ways to preview its resume
        commands += [("resume-dry", ["resume", str(mutated), "--dry-run"]),
                     ("hunt-resume-dry", ["hunt", str(b.hunt_matrix), "-i", str(REPO / "inventory" / "local.yaml"),
                                          "--resume", str(mutated), "--dry-run"])]  # fmt: skip
    return [*commands, ("report", ["report", str(mutated)])]


def _serve_case(case: Path, b: Bases) -> Path:
    """A reports folder for the serve app: the run, the hunt and a copy of the run under a folder name
    of odd bytes; beside it a file that must never be served, which a symlinked file in the run and a
    symlinked folder in reports/ point to."""
    reports = case / "reports"
    for base, name in ((b.run, RUN_ID), (b.hunt, HUNT_ID), (b.run, ODD_ID)):
        shutil.copytree(base, reports / name)
    (case / "secret.txt").write_text(SECRET + "\n")
    (reports / RUN_ID / "leak.txt").symlink_to(case / "secret.txt")
    (reports / "leakdir").symlink_to(case)
    return reports


# ---------------------------------------------------------------- running one command


@dataclass
class Result:
    code: int | None  # None: killed (time or memory)
    output: str
    seconds: float  # CPU seconds (user + system): what a busy machine's load does not inflate
    wall: float
    peak_mb: float | None  # None: not measured (in-process)
    touched: list[str] = field(default_factory=list)


@contextlib.contextmanager
def no_hosts(touched: list[str]) -> Iterator[None]:
    """connect() and process starts refused and recorded while a command runs: a validate, plan or
    dry run that tried one would have touched a host."""

    def refuse(what: str) -> Callable[..., object]:
        def refused(*args: object, **kwargs: object) -> object:
            touched.append(f"{what}{args[1:2]!r}"[:200])
            raise OSError(f"fuzz: {what} refused")

        return refused

    saved = [(socket.socket, "connect"), (socket.socket, "connect_ex"), (subprocess.Popen, "_execute_child"),
             (os, "system"), (os, "posix_spawn"), (os, "posix_spawnp"), (os, "execv"), (os, "execve")]  # fmt: skip
    old = [(owner, name, getattr(owner, name)) for owner, name in saved]
    for owner, name in saved:
        setattr(owner, name, refuse(name))
    try:
        yield
    finally:
        for owner, name, value in old:
            setattr(owner, name, value)


def call_main(argv: list[str]) -> tuple[int, str, list[str]]:
    """orch's main() on argv here (or, for `__serve__`, one request to the serve app): its exit code,
    stdout + stderr, what it tried to touch."""
    from orchestrator.cli.main import main

    buf, touched = io.StringIO(), []
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf), no_hosts(touched):
        try:
            code = serve_request(Path(argv[1]), bytes.fromhex(argv[2])) if argv[0] == "__serve__" else main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
        except BaseException:  # noqa: BLE001 - what the user would see: the traceback
            traceback.print_exc(file=buf)
            code = -1
    return code, buf.getvalue(), touched


def serve_request(reports: Path, request: bytes, wait: float = 30.0) -> int:
    """One request to `orch serve`'s app (team.serve's server and handler, as `orch serve` makes them)
    over a socket pair: no connection to anything, not even loopback. Prints the answer's status line
    (FUZZ-SERVE-STATUS) and FUZZ-SERVE-LEAK if its body holds the file outside reports/; 0."""
    from orchestrator.team.serve import make_server

    server = make_server(reports, "127.0.0.1", 0)
    ours, theirs = socket.socketpair()
    failed: list[str] = []

    def handle() -> None:
        try:
            server.finish_request(theirs, ("127.0.0.1", 40000))
        except BaseException:  # noqa: BLE001 - a traceback the server would print
            failed.append(traceback.format_exc())
        finally:
            server.shutdown_request(theirs)

    worker = threading.Thread(target=handle, daemon=True)
    try:
        worker.start()
        ours.settimeout(wait)
        with contextlib.suppress(OSError):  # the server may answer (414, 431) and close before reading it all
            ours.sendall(request)
            ours.shutdown(socket.SHUT_WR)
        reply = _read_all(ours)
        worker.join(wait)
    finally:
        ours.close()
        server.server_close()
    print("".join(failed), end="")
    head = reply.split(b"\r\n", 1)[0].decode("latin-1")
    status = re.match(r"HTTP/1\.[01] (\d{3})", head)
    print(f"FUZZ-SERVE-STATUS {status.group(1) if status else 'none'} {head[:100]!r} ({len(reply)} bytes)")
    if SECRET.encode() in reply or b"root:x:0:0" in reply:
        print("FUZZ-SERVE-LEAK a file outside reports/ was served")
    return 0


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(OSError):
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks)


def in_process(argv: list[str], kill_after: float) -> Result:
    t0, c0 = time.perf_counter(), time.process_time()
    code, output, touched = call_main(argv)
    return Result(code, output, time.process_time() - c0, time.perf_counter() - t0, None, touched)


def forked(argv: list[str], kill_after: float, hard_mb: float = 1024) -> Result:
    """main(argv) in a forked child (its output in a file): exit code, CPU and CPU time, peak RSS
    (the kernel's ru_maxrss); killed past kill_after seconds of wall time (a hang: no CPU spent) or
    hard_mb of RSS."""
    with tempfile.TemporaryFile() as sink:
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _child(argv, sink.fileno())
        killed, status, usage = _watch(pid, t0, kill_after, hard_mb)
        seconds = time.perf_counter() - t0
        sink.seek(0)
        text = sink.read().decode("utf-8", "replace")
    touched = re.findall(r"^FUZZ-TOUCHED (.*)$", text, re.M)
    code = None if killed else os.waitstatus_to_exitcode(status)
    code = -1 if code == 99 and "Traceback (most recent call last)" in text else code
    cpu = usage.ru_utime + usage.ru_stime
    return Result(code, text, cpu, seconds, usage.ru_maxrss / 1024, touched)


def _child(argv: list[str], fd: int) -> None:
    try:
        os.setpgid(0, 0)
        code, output, touched = call_main(argv)
        os.write(fd, output.encode("utf-8", "replace"))
        os.write(fd, "".join(f"\nFUZZ-TOUCHED {t}" for t in touched).encode())
    except BaseException:  # noqa: BLE001
        os.write(fd, traceback.format_exc().encode())
        code = -1
    os._exit(99 if code == -1 else code & 0xFF)


def _watch(pid: int, t0: float, kill_after: float, hard_mb: float) -> tuple[bool, int, object]:
    killed = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return killed, status, usage
        if not killed and (time.perf_counter() - t0 > kill_after or _rss_mb(pid) > hard_mb):
            os.kill(pid, signal.SIGKILL)
            killed = True
        time.sleep(0.005)


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            return next((int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS:")), 0.0)
    except OSError:
        return 0.0


# ---------------------------------------------------------------- verdicts


WHOLE_FILE = r"(file is larger than|over \d+ MiB|is empty|no such file)"
BETWEEN_FILES = r"the plan \(\d+ trials\) is not the one run\.json describes"  # plan.json edited: its digest
BETWEEN_RUNS = r"nothing to compare: run [AB] has no completed trial"  # `orch compare` of a journal left empty


def serve_verdict(r: Result) -> str:
    """A served answer: 4xx (refused: 'ok2') or 2xx/3xx ('ok0'); BAD: none, a 5xx, a traceback, a
    file from outside reports/."""
    status = re.search(r"^FUZZ-SERVE-STATUS (\S+)", r.output, re.M)
    if "Traceback (most recent call last)" in r.output or r.code != 0 or status is None:
        return "BAD traceback"
    if "FUZZ-SERVE-LEAK" in r.output:
        return "BAD served a file outside reports/"
    if not status.group(1).isdigit():
        return "BAD no answer"
    code = int(status.group(1))
    if code == 505:  # a request line without a version (HTTP/0.9): team.serve's deliberate answer
        return "ok2"
    return f"BAD answered {code}" if code >= 500 else "ok2" if code >= 400 else "ok0"


def verdict(m: Mutant, command: str, r: Result, max_seconds: float, max_mb: float) -> str:
    """'ok0', 'ok2' or 'BAD <why>'."""
    if r.touched:
        return "BAD touched a host"
    if r.code is None:
        return "BAD killed (time or memory)"
    if r.seconds > max_seconds:
        return f"BAD over {max_seconds:g} CPU s"
    if r.peak_mb is not None and r.peak_mb > max_mb:
        return f"BAD over {max_mb:g} MB"
    if m.family == "serve":
        return serve_verdict(r)
    if "Traceback (most recent call last)" in r.output or r.code == -1:
        return "BAD traceback"
    if r.code == 0:
        return "ok0"
    if r.code != 2:
        return f"BAD exit {r.code}"
    if re.search(rf"{re.escape(m.file)}:\d+|{re.escape(m.file)}\b.*\bline \d+", r.output):
        return "ok2"
    if re.search(r"[\w.-]+\.(?:yaml|json|jsonl):\d+: ", r.output):
        return "ok2"  # another file's line: a hunt matrix given to `orch run` names its `hunt:` line
    if re.search(rf"{re.escape(m.file)}: {WHOLE_FILE}", r.output):
        return "ok2"  # a fault of the whole file: it has no line to name
    if m.family == "queuedb" and re.search(r"queue\.db\b", r.output):
        return "ok2"  # a database file has no lines: named, it is found
    if re.search(rf"{re.escape(m.file)}: {BETWEEN_FILES}|{BETWEEN_RUNS}", r.output):
        return "ok2"  # a fault between two files or two runs: no one line is wrong
    return "BAD exit 2 without file:line"


def error_line(output: str) -> str:
    """The line a BAD case is grouped by: a traceback's last line and innermost orch frame, or the
    error's first line with the case's folder and numbers blanked."""
    lines = [line for line in output.splitlines() if line.strip() and not line.startswith("FUZZ-TOUCHED")]
    if any("Traceback" in line for line in lines):
        frames = [line.strip() for line in lines if "orchestrator/" in line and line.strip().startswith("File")]
        where = re.sub(r'.*orchestrator/(\S+)", line (\d+), in (\S+)', r"\1:\2 \3", frames[-1]) if frames else ""
        return f"{lines[-1][:160]} @ {where}"
    first = next((line for line in lines if "error" in line.lower()), lines[0] if lines else "")
    return re.sub(r"/tmp/\S*?/(\d+)/", "CASE/", first)[:200]


def cause(line: str) -> str:
    """A BAD case's group: its error line with values and numbers blanked."""
    return re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "_", line)[:140]


def check(m: Mutant, root: Path, b: Bases, runner: Callable[[list[str], float], Result], args: argparse.Namespace
          ) -> list[tuple[str, str, Result]]:  # fmt: skip
    """Every command on the mutant: (command, verdict, result); the inventory's folder checked unchanged."""
    case = root / str(m.seed)
    commands = lay_out(m, case, b)
    before = _tree(case / "local")
    results = []
    for name, argv in commands:
        r = runner(argv, args.kill_after)
        v = verdict(m, name, r, args.max_seconds, args.max_mb)
        if _tree(case / "local") != before:
            v, r.touched = "BAD touched a host", [*r.touched, "the inventory's env files changed"]
        results.append((name, v, r))
    if not args.keep_cases:
        shutil.rmtree(case, ignore_errors=True)
    return results


def _tree(folder: Path) -> str:
    if not folder.exists():
        return ""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        h.update(str(p).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


# ---------------------------------------------------------------- main


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=3000, help="mutants (seeds seed .. seed+n-1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", type=int, action="append", help="replay this seed (repeatable): diff and output shown")
    p.add_argument("--in-process", action="store_true", help="call main() here (no fork, no RSS)")
    p.add_argument("--max-seconds", type=float, default=5.0)
    p.add_argument("--max-mb", type=float, default=500.0)
    p.add_argument("--kill-after", type=float, default=60.0, help="wall seconds (a hang); the limit is CPU s")
    p.add_argument("--keep-cases", action="store_true", help="keep each case's folder")
    p.add_argument("--quiet", action="store_true", help="no line per BAD case as it is found")
    p.add_argument("--targets", type=lambda t: tuple(t.split(",")), help=f"only these families ({', '.join(WEIGHTS)})")
    return p.parse_args(argv)


def run(args: argparse.Namespace) -> dict[str, Counter[str]]:
    """Every mutant checked; returns the tally per kind (ok0, ok2, BAD) and prints the report."""
    print(load_line(), flush=True)
    _preload()
    runner = in_process if args.in_process else forked
    tally: dict[str, Counter[str]] = defaultdict(Counter)
    tally_target: dict[str, Counter[str]] = defaultdict(Counter)
    bad: dict[str, list[str]] = defaultdict(list)
    seeds = args.only or list(range(args.seed, args.seed + args.n))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="orch-fuzz-") as tmp:
        root = Path(tmp)
        made = make_bases(root / "base")
        bases = base_texts(made)
        for seed in seeds:
            m = draw(seed, bases, args.targets)
            if m is None:  # the kind means nothing for --targets
                continue
            results = check(m, root / "cases", made, runner, args)
            tally_target[m.family]["BAD" if any(v.startswith("BAD") for _, v, _ in results) else "ok"] += 1
            worst = next((v for _, v, _ in results if v.startswith("BAD")), None)
            tally[m.kind]["BAD" if worst else "ok2" if any(v == "ok2" for _, v, _ in results) else "ok0"] += 1
            for name, v, r in results:
                if v.startswith("BAD"):
                    line = f"seed {seed} {m.kind} {m.target} {name}: {v}: {error_line(r.output)}"
                    bad[f"{v} | {cause(error_line(r.output))}"].append(line)
                    if not args.quiet:
                        print(line, flush=True)
            if args.only:
                _show(m, results)
    _print_tally(tally, bad, sum(sum(t.values()) for t in tally.values()), time.perf_counter() - t0)
    print("by target: " + ", ".join(f"{k} {sum(t.values())} ({t['BAD']} BAD)" for k, t in sorted(tally_target.items())))
    return tally


def _preload() -> None:
    """The modules every command imports, imported once here (each forked child starts with them)."""
    import orchestrator.cli.main  # noqa: F401
    import orchestrator.cli.planview  # noqa: F401
    import orchestrator.report.render  # noqa: F401
    import orchestrator.report.site  # noqa: F401
    import orchestrator.sweep.prepare  # noqa: F401
    import orchestrator.team.livestatus  # noqa: F401
    import orchestrator.team.serve  # noqa: F401


def _show(m: Mutant, results: list[tuple[str, str, Result]]) -> None:
    diff = difflib.unified_diff(m.base.splitlines(), m.text.splitlines(), m.target, "mutant", lineterm="", n=1)
    print("\n".join(line[:300].encode("utf-8", "backslashreplace").decode() for line in diff))  # bad bytes shown
    for name, v, r in results:
        peak = f"{r.peak_mb:.0f} MB" if r.peak_mb is not None else "RSS not measured"
        print(f"--- {name}: exit {r.code}, {r.seconds:.2f} CPU s ({r.wall:.2f} s wall), {peak}: {v}")
        print(r.output[-3000:])


def _print_tally(tally: dict[str, Counter[str]], bad: dict[str, list[str]], n: int, seconds: float) -> None:
    print(f"\n{n} mutants in {seconds:.0f} s; {load_line()}")
    print(f"{'kind':16s} {'mutants':>7s} {'exit 0':>7s} {'exit 2':>7s} {'BAD':>5s}")
    for kind in KINDS:
        t = tally.get(kind, Counter())
        print(f"{kind:16s} {sum(t.values()):7d} {t['ok0']:7d} {t['ok2']:7d} {t['BAD']:5d}")
    total = Counter[str]()
    for t in tally.values():
        total.update(t)
    print(f"{'all':16s} {sum(total.values()):7d} {total['ok0']:7d} {total['ok2']:7d} {total['BAD']:5d}")
    print(f"\n{len(bad)} distinct BAD causes")
    for key, lines in sorted(bad.items(), key=lambda kv: -len(kv[1])):
        seeds = sorted({int(line.split()[1]) for line in lines})
        print(f"- {len(lines)} x {key}\n    seeds: {' '.join(map(str, seeds[:30]))}{' ...' if len(seeds) > 30 else ''}")
        print(f"    e.g. {lines[0][:300]}")


if __name__ == "__main__":
    run(parse())
