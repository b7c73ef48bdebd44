"""`orch serve` never loads a whole run file: a raw text larger than MAX_MASKED_BYTES is served as
its last whole lines under a note, still masked; any other file is streamed from disk; a HEAD of
a raw text reads none of it. Found in review: one HEAD of a 512 MiB repro.out cost ~1.5 GiB."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import BytesIO
from pathlib import Path

import httpx
import pytest
from helpers.serving import serving

from orchestrator.core.redact import REDACTED, Redactor
from orchestrator.team import serve
from orchestrator.team.serve import MAX_MASKED_BYTES

pytestmark = pytest.mark.timeout(60)

RUN = "20260101-000000-big"
BIG = 64 << 20  # sparse: no disk used
CUT = BIG - MAX_MASKED_BYTES  # where the served tail of repro.out starts
SPLIT = "API_TOKEN=tok-split-secret-1\n"  # the cut falls inside its name: "EN=tok-..." must not show
LAST = "login hf_AbCdEfGhIjKlMnOpQrStUv\nCORRUPTION sessions: 1/40\n"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("serve-big") / "reports" / RUN
    (run / "trials" / "0001").mkdir(parents=True)
    (run / "run.json").write_text("{}")
    with open(run / "trials" / "0001" / "repro.out", "wb") as f:
        f.truncate(BIG - len(LAST))
        f.seek(CUT - 8)
        f.write(SPLIT.encode())
        f.seek(BIG - len(LAST))
        f.write(LAST.encode())
    with open(run / "chart.png", "wb") as f:
        f.truncate(BIG // 2)
        f.seek(BIG // 2 - 4)
        f.write(b"PEND")
    line = json.dumps({"trial": 0, "pad": "x" * 200}) + "\n"
    (run / "journal.jsonl").write_text(line * (MAX_MASKED_BYTES // len(line) + 1000))
    return run


@pytest.fixture(scope="module")
def base(run_dir: Path) -> Iterator[str]:
    with serving(run_dir.parent) as url:
        yield f"{url}/{RUN}"


@pytest.fixture
def http(base: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    def whole(self: Path) -> bytes:
        raise AssertionError(f"{self} read whole")

    monkeypatch.setattr(Path, "read_bytes", whole)
    with httpx.Client(base_url=base, trust_env=False, timeout=30) as client:
        yield client


def test_a_large_repro_output_is_served_as_its_masked_tail_under_a_note(http: httpx.Client) -> None:
    r = http.get("/trials/0001/repro.out")
    assert r.status_code == 200 and r.headers["content-type"] == "text/plain; charset=utf-8"
    body = r.content
    assert len(body) <= MAX_MASKED_BYTES + 512 and int(r.headers["content-length"]) == len(body)
    note, _, rest = body.partition(b"\n")
    assert note.startswith(b"[orch serve: repro.out holds 67,108,864 bytes; shown are its last ")
    assert rest.endswith(f"login {REDACTED}\nCORRUPTION sessions: 1/40\n".encode())
    assert b"tok-split-secret-1" not in body and b"hf_AbCd" not in body  # the cut line is dropped whole


def test_a_head_of_a_raw_text_reads_none_of_it(http: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> bytes:
        raise AssertionError("a HEAD masked the file")

    monkeypatch.setattr(serve, "masked_text", refuse, raising=False)  # (before the fix: no such name)
    r = http.head("/trials/0001/repro.out")
    assert r.status_code == 200 and r.content == b"" and "content-length" not in r.headers
    assert r.headers["content-type"] == "text/plain; charset=utf-8"


def test_a_large_journal_tail_still_parses_line_by_line(http: httpx.Client) -> None:
    r = http.get("/journal.jsonl")
    lines = r.content.splitlines()
    assert len(r.content) <= MAX_MASKED_BYTES + 512
    assert "orch_serve_note" in json.loads(lines[0]) and all(json.loads(x)["trial"] == 0 for x in lines[1:])


def test_a_large_unmasked_file_is_streamed_whole(http: httpx.Client) -> None:
    r = http.head("/chart.png")
    assert r.status_code == 200 and int(r.headers["content-length"]) == BIG // 2 and r.content == b""
    with http.stream("GET", "/chart.png") as r:
        size, last = 0, b""
        for chunk in r.iter_bytes():
            size, last = size + len(chunk), (last + chunk)[-4:]
    assert r.headers["content-type"] == "image/png" and size == BIG // 2 and last == b"PEND"


def test_a_small_raw_text_is_served_whole_and_masked(http: httpx.Client, run_dir: Path) -> None:
    (run_dir / "trials" / "0001" / "small.log").write_text("HF_TOKEN=hf_secret\nok\n")
    r = http.get("/trials/0001/small.log")
    assert r.text == f"HF_TOKEN={REDACTED}\nok\n" and int(r.headers["content-length"]) == len(r.content)


def test_the_tail_starts_at_a_line_and_a_window_without_one_shows_nothing() -> None:
    data = b"a" * 10 + b"\n" + b"b" * (MAX_MASKED_BYTES - 1) + b"\n"  # the window starts right after "\n"
    note, _, shown = serve.masked_text(BytesIO(data), len(data), "x.out", Redactor()).partition(b"\n")
    assert shown == data[11:] and b"shown are its last 8,388,608 " in note
    line = b"TOKEN=" + b"v" * MAX_MASKED_BYTES  # one line beyond the window: its name would be cut off
    note, _, shown = serve.masked_text(BytesIO(line), len(line), "x.out", Redactor()).partition(b"\n")
    assert shown == b"" and b"shown are its last 0 " in note
