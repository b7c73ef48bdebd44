"""edges.httpread on httpx.MockTransport (no sockets): one request ends at its deadline however
the server trickles, reads at most its byte cap, never decompresses, and a body nested too deep
for json.loads is "not JSON" (review B: these failed through client.get / .json() / iter_bytes)."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from helpers.streams import Body, client, gzip_bomb, trickle

from orchestrator.edges import httpread
from orchestrator.edges.httpread import AnswerEncoded, AnswerTimedOut, AnswerTooLarge, NotJson, parse_json, request
from orchestrator.errors import OrchError

URL = "http://server.fake:30000/x"
DEEP = '{"a":' + "[" * 30000 + "]" * 30000 + "}"  # 60 KB


def test_a_trickling_answer_ends_at_the_deadline() -> None:
    body = trickle(10.0, 0.05)
    with client(lambda: body) as c:
        started = time.monotonic()
        with pytest.raises(AnswerTimedOut) as caught:
            request(c, "GET", URL, deadline_s=0.3, max_bytes=1 << 20)
        took = time.monotonic() - started
    assert took < 1.0, f"a 0.3 s request took {took:.1f} s"
    assert isinstance(caught.value, OrchError)
    assert str(caught.value).startswith(f"{URL}: no complete answer within 0.3 s (")


def test_a_timeout_of_httpx_is_the_same_typed_timeout_naming_it() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as c, pytest.raises(AnswerTimedOut) as caught:
        request(c, "GET", URL, deadline_s=1.0, max_bytes=10)
    assert "no complete answer within 1 s (ReadTimeout)" in str(caught.value)


def test_a_body_past_the_cap_is_refused_having_read_at_most_one_chunk_more() -> None:
    body = Body(64 * 1024, 4096)  # 256 MiB if read whole
    with client(lambda: body) as c, pytest.raises(AnswerTooLarge) as caught:
        request(c, "GET", URL, deadline_s=5.0, max_bytes=100_000)
    assert body.pulled <= 100_000 + 64 * 1024
    assert caught.value.status == 200 and f"{URL}: more than 100000 bytes (" in str(caught.value)


def test_a_declared_length_past_the_cap_is_refused_before_reading() -> None:
    body = Body(1000, 10)
    with client(lambda: body, headers={"Content-Length": "10000"}) as c, pytest.raises(AnswerTooLarge):
        request(c, "GET", URL, deadline_s=5.0, max_bytes=9999)
    assert body.pulled == 0


def test_keep_prefix_returns_the_first_bytes_and_says_it_cut() -> None:
    body = Body(64 * 1024, 4096)
    with client(lambda: body) as c:
        answer = request(c, "GET", URL, deadline_s=5.0, max_bytes=1000, keep_prefix=True)
    assert (answer.status, answer.body, answer.truncated) == (200, b"x" * 1000, True)
    assert body.pulled == 64 * 1024


def test_a_whole_answer_within_the_cap_is_returned_as_is() -> None:
    with client(lambda: b'{"pid": 7}', status=503, headers={"X-A": "b"}) as c:
        answer = request(c, "GET", URL, deadline_s=5.0, max_bytes=10)
    assert (answer.status, answer.body, answer.truncated, answer.headers["x-a"]) == (503, b'{"pid": 7}', False, "b")


def test_a_body_the_transport_already_holds_is_read_too() -> None:
    """httpx.MockTransport with `json=` hands over a body already read: nothing left to stream."""
    handler = httpx.MockTransport(lambda r: httpx.Response(200, json={"a": 1}))
    with httpx.Client(transport=handler) as c:
        assert request(c, "GET", URL, deadline_s=1.0, max_bytes=100).body == b'{"a":1}'


def test_identity_is_asked_for_and_the_callers_headers_kept() -> None:
    seen: list[httpx.Request] = []
    with client(lambda: b"ok", seen=seen) as c:
        request(c, "POST", URL, deadline_s=1.0, max_bytes=10, json_body={"k": 1}, headers={"Accept": "text/plain"})
    (sent,) = seen
    assert sent.headers["accept-encoding"] == "identity" and sent.headers["accept"] == "text/plain"
    assert sent.content == b'{"k":1}'


@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip", "br", "identity, deflate"])
def test_an_encoded_answer_is_refused_undecoded(encoding: str) -> None:
    """A 64 MiB gzip bomb of a few hundred bytes: httpx would decode it whole, in one chunk."""
    bomb = gzip_bomb(64 << 20)
    assert len(bomb) < 4096
    body = Body(1, 1, fill=bomb)
    with client(lambda: body, headers={"Content-Encoding": encoding}) as c, pytest.raises(AnswerEncoded) as caught:
        request(c, "GET", URL, deadline_s=5.0, max_bytes=8_000_000)
    assert caught.value.status == 200 and body.pulled == 0
    assert f"({encoding.replace('identity, ', '')})" in str(caught.value) and "Accept-Encoding: identity" in str(
        caught.value
    )


def test_identity_content_encoding_is_read() -> None:
    with client(lambda: b"plain", headers={"Content-Encoding": "identity"}) as c:
        assert request(c, "GET", URL, deadline_s=1.0, max_bytes=10).body == b"plain"


def test_status_only_reads_none_of_the_body() -> None:
    body = trickle(10.0, 0.1)
    with client(lambda: body, status=201, headers={"Content-Encoding": "gzip"}) as c:
        started = time.monotonic()
        answer = request(c, "POST", URL, deadline_s=0.5, max_bytes=0)
    assert (answer.status, answer.body, body.pulled) == (201, b"", 0)
    assert time.monotonic() - started < 0.5


def test_a_deeply_nested_body_is_not_json() -> None:
    with pytest.raises(NotJson, match="^where: not JSON"):
        parse_json(DEEP, "where")


def test_nesting_past_the_depth_cap_is_not_json() -> None:
    depth = httpread.MAX_JSON_DEPTH
    assert parse_json("[" * depth + "]" * depth, "w") is not None
    with pytest.raises(NotJson, match=f"deeper than {depth}"):
        parse_json('{"a":' + "[" * depth + "]" * depth + "}", "w")


@pytest.mark.parametrize("bad", [b"", b"{", b"\xff\xfe\x00", "nan-ish"])
def test_invalid_bodies_are_not_json(bad: bytes | str) -> None:
    with pytest.raises(NotJson):
        parse_json(bad, "w")


def test_json_values_come_back() -> None:
    assert parse_json(b'{"pid": 12, "flags": {"a": [1, null]}}', "w") == {"pid": 12, "flags": {"a": [1, None]}}
    assert parse_json("null", "w") is None


@pytest.mark.parametrize(
    "body", [b'{"version": "0.5\\ud800"}', b'{"version": "0.5\xed\xa0\x80"}'], ids=["escaped", "encoded"]
)
def test_a_server_answering_a_lone_surrogate_says_no_server_info_and_its_trial_is_recorded(body: bytes) -> None:
    """json.loads keeps a lone surrogate (escaped, or its bytes through 'surrogatepass'): a server
    saying such a version made a ServerInfo whose version no trial record can hold (pydantic's
    serializer raises on it: the trial's journal line would not be written). Now the answer is not
    JSON text, so the server told nothing, as for any answer that is no JSON."""
    from orchestrator.edges.provenance import server_info

    with pytest.raises(NotJson, match="not Unicode text|can't decode"):
        parse_json(body, URL)
    with httpx.Client(transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body))) as c:
        assert server_info("http://server.fake:30000", c) is None


def _due_now() -> tuple[httpread._Watchdog, socket.socket, socket.socket]:
    """A watchdog whose deadline (and grace) has passed, and a socket pair: ours, the peer's."""
    ours, peer = socket.socketpair()
    peer.settimeout(2)
    return httpread._Watchdog(time.monotonic() - httpread.WATCHDOG_GRACE_S - 1.0, None), ours, peer


def test_a_cancelled_deadline_never_shuts_the_socket_down_later() -> None:
    """A request that ended cancels its deadline; the socket (a pooled keep-alive connection the
    next request uses) must not be shut down when the old deadline comes round."""
    reaper = httpread._Reaper()
    ours, peer = socket.socketpair()
    peer.settimeout(2)
    # due a second from now: cancelled well before (armed due already, the reaper thread could
    # fire between arm and cancel, as it should: CI caught that once)
    dog = httpread._Watchdog(time.monotonic() + 1.0 - httpread.WATCHDOG_GRACE_S, None)
    with ours, peer:
        reaper.arm(dog, (ours,))
        reaper.cancel(dog)
        end = time.monotonic() + 5
        while reaper._heap and time.monotonic() < end:  # its entry leaves at its time, firing nothing
            time.sleep(0.02)
        assert not reaper._heap
        ours.sendall(b"still open")
        assert peer.recv(64) == b"still open" and not dog.fired


def test_deadlines_due_at_the_same_moment_each_fire() -> None:
    """Two requests armed with the same deadline: the heap orders them by their arming, never by
    comparing the watchdogs (a TypeError in the reaper thread left every later deadline unfired)."""
    reaper = httpread._Reaper()
    (first, a, a_peer), (second, b, b_peer) = _due_now(), _due_now()
    second.deadline = first.deadline
    with a, a_peer, b, b_peer:
        reaper.arm(first, (a,))
        reaper.arm(second, (b,))
        end = time.monotonic() + 5
        while not (first.fired and second.fired) and time.monotonic() < end:
            time.sleep(0.01)
        assert first.fired and second.fired
        assert a_peer.recv(8) == b"" and b_peer.recv(8) == b""  # shut down: each peer sees the end


def test_a_status_only_request_reads_no_body_and_calls_none_cut() -> None:
    """max_bytes 0 (a probe that needs the status alone): no body read, and not "truncated" (a
    health check reads a truncated answer as one it could not parse)."""
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503, content=b"x" * 100))) as c:
        answer = request(c, "GET", URL, deadline_s=1.0, max_bytes=0)
    assert (answer.status, answer.body, answer.truncated) == (503, b"", False)


def test_a_timed_out_answer_has_no_status() -> None:
    """A timeout has no HTTP status to show (a scrape says "HTTP <status>" only when there is one)."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as c, pytest.raises(AnswerTimedOut) as caught:
        request(c, "GET", URL, deadline_s=1.0, max_bytes=10)
    assert caught.value.status is None
