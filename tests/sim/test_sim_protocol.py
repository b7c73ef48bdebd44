"""The wire format and the repro's judgement of answers (pure: no processes)."""

from __future__ import annotations

import json
import random
import re

import pytest

from orchestrator.sim import protocol
from orchestrator.sim.repro import Checked, SessionOutcome, _tool_result, check_answer, classify, percentile, summarize


def ask(round_: int = 1, rounds: int = 3, seed: int = 0) -> protocol.ToolAsk:
    return protocol.make_ask(random.Random(seed), "r1-007", round_, rounds)


def request_for(a: protocol.ToolAsk) -> dict[str, object]:
    return {
        "user": a.session,
        "messages": [
            {"role": "system", "content": protocol.context_filler(20)},
            {"role": "user", "content": "an earlier step, already done"},
            {"role": "user", "content": a.instruction()},
        ],
        "tools": protocol.tool_specs(),
    }


def answer(message: dict[str, object]) -> bytes:
    return json.dumps(protocol.completion(message, "tool_calls", "x")).encode()


@pytest.mark.parametrize("seed", range(20))
def test_the_server_reads_back_exactly_what_the_client_asked(seed: int) -> None:
    a = ask(2, 3, seed)
    assert protocol.parse_ask(request_for(a)) == a


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"messages": []},
        {"user": "s", "messages": [{"role": "user", "content": "hello"}]},
        {"user": "s", "messages": [{"role": "user", "content": "Step 1 of 3: call tool `grep` with arguments {bad"}]},
    ],
)
def test_requests_without_an_instruction_are_refused(body: object) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.parse_ask(body)


def test_a_correct_call_is_ok_and_the_final_one_is_done() -> None:
    first, last = ask(1, 3), ask(3, 3)
    ok = check_answer(first, 200, answer(protocol.tool_call_message(first, first.arguments_json, "c1")))
    assert ok.verdict == "ok" and not ok.done
    fin = check_answer(last, 200, answer(protocol.tool_call_message(last, last.arguments_json, "c3")))
    assert fin.verdict == "ok" and fin.done


def test_argument_order_and_spacing_do_not_matter() -> None:
    a = ask()
    spaced = json.dumps(dict(reversed(list(json.loads(a.arguments_json).items()))), indent=2)
    assert check_answer(a, 200, answer(protocol.tool_call_message(a, spaced, "c"))).verdict == "ok"


@pytest.mark.parametrize("u", [0.0, 0.2, 0.49, 0.5, 0.8, 0.99])
@pytest.mark.parametrize("other", [None, '{"path":"/srv/app/r1-003/module_2.py","start_line":5}'])
def test_every_leak_is_detected(u: float, other: str | None) -> None:
    for seed in range(10):
        a = ask(1, 3, seed)
        leaked = protocol.leaked_arguments(a, other, u)
        assert leaked != a.arguments_json
        checked = check_answer(a, 200, answer(protocol.tool_call_message(a, leaked, "c")))
        assert checked.verdict == "leak", (leaked, checked)


def test_leaks_carry_a_special_token_or_foreign_values() -> None:
    a = ask()
    assert protocol.SPECIAL_TOKEN in protocol.leaked_arguments(a, None, 0.1)
    foreign = '{"aaa":"/srv/app/r9-999/x"}'
    assert "r9-999" in protocol.leaked_arguments(a, foreign, 0.7)


def test_wrong_tool_and_plain_text_and_errors() -> None:
    a = ask()
    wrong = protocol.tool_call_message(a, a.arguments_json, "c")
    wrong["tool_calls"][0]["function"]["name"] = "not_" + a.tool  # type: ignore[index]
    assert check_answer(a, 200, answer(wrong)).verdict == "leak"
    assert check_answer(a, 200, answer(protocol.text_message(a))).verdict == "no_tool"
    assert check_answer(a, 503, b'{"error":"warming"}').verdict == "error"
    assert check_answer(a, 200, b"not json").verdict == "error"
    assert check_answer(a, 200, b'{"choices": []}').verdict == "error"


def test_sessions_end_at_their_first_bad_answer() -> None:
    ok, done = Checked("ok"), Checked("ok", done=True)
    assert classify([ok, ok, done], 3) == "done"
    assert classify([ok, ok, ok], 3) == "maxrounds"  # never said it finished
    assert classify([ok, Checked("leak")], 3) == "leak"
    assert classify([Checked("no_tool")], 3) == "no_tool"
    assert classify([ok, Checked("error")], 3) == "error"


def test_summary_lines_have_the_real_repro_format() -> None:
    outcomes = [SessionOutcome("done", [0.010, 0.020, 0.030]) for _ in range(39)]
    outcomes.append(SessionOutcome("no_tool", [0.5]))
    lines = summarize(outcomes, 1.94)
    assert lines[0] == 'wall=1.9s counts={"done": 39, "no_tool": 1}'
    assert lines[1] == ("CORRUPTION sessions: 1/40 = 2%  (leak=0 no_tool=1 error=0 ok-ish[done/maxrounds]=39)")
    assert re.fullmatch(r"THROUGHPUT req/s=60\.8 p50_latency_ms=20\.0 p99_latency_ms=\d+\.\d", lines[2])


def test_error_sessions_are_infrastructure_never_corruption() -> None:
    """Issue 12: HTTP 503s from a foreign router were counted as corruption. An error session is
    left out of k and n (n = completed sessions) and reported on its own line."""
    lines = summarize([SessionOutcome("error"), SessionOutcome("maxrounds"), SessionOutcome("leak")], 1.0)
    assert "CORRUPTION sessions: 1/2 = 50%  (leak=1 no_tool=0 error=1 ok-ish[done/maxrounds]=1)" == lines[1]
    assert lines[3].startswith("ERRORS sessions: 1/3 ")


def test_all_error_sessions_give_no_corruption_data() -> None:
    lines = summarize([SessionOutcome("error", detail="HTTP 503") for _ in range(4)], 1.0)
    assert lines[1] == "CORRUPTION sessions: 0/0 = 0%  (leak=0 no_tool=0 error=4 ok-ish[done/maxrounds]=0)"
    assert lines[3].startswith("ERRORS sessions: 4/4 ")


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile(values, 100)) == (50.0, 99.0, 100.0)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) != percentile([], 50)  # NaN


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"messages": []}, "needs a session id"),
        ({"metadata": {"other": "x"}, "messages": []}, "needs a session id"),
        ({"metadata": {"session_id": 7}, "messages": []}, "needs a session id"),
        ({"user": "s1", "messages": "Step 1 of 2"}, "needs a session id"),
        ({"user": "s1", "messages": ["a string", {"role": "system", "content": "x"}]}, "no 'Step i of n"),
    ],
)
def test_a_request_without_a_session_or_an_instruction_is_refused_saying_which(
    body: dict[str, object], said: str
) -> None:
    """Refused as a ProtocolError (400 from the decode), never a crash on a message that is not an
    object or a session id that is not text (metadata.session_id is the one the real router keeps)."""
    with pytest.raises(protocol.ProtocolError, match=said):
        protocol.parse_ask(body)


def test_a_session_id_in_metadata_is_read_when_user_is_dropped() -> None:
    ask = protocol.make_ask(random.Random(1), "s9", 1, 2)
    messages = [{"role": "user", "content": ask.instruction()}]
    assert protocol.parse_ask({"metadata": {"session_id": "s9"}, "messages": messages}) == ask


def test_every_tool_is_offered_as_an_open_function() -> None:
    specs = protocol.tool_specs()
    assert [s["function"]["name"] for s in specs] == list(protocol.TOOL_NAMES)  # type: ignore[index]
    assert all(s["type"] == "function" for s in specs)
    assert all(s["function"]["parameters"] == {"type": "object", "additionalProperties": True} for s in specs)  # type: ignore[index]


def test_a_valid_json_leak_carries_the_foreign_value_and_a_token_only_when_that_value_is_its_own() -> None:
    """u >= 0.5: the first argument takes another session's first value, as is; a foreign value
    equal to its own would leave the call unchanged (an undetectable "leak"), so it gets the
    special token instead, as a leak with no other session's text does."""
    a = ask()
    own = json.loads(a.arguments_json)
    key = sorted(own)[0]
    foreign = protocol.leaked_arguments(a, json.dumps({"aaa": "X-foreign"}), 0.7)
    assert foreign == protocol.canonical_json({**own, key: "X-foreign"})
    same = protocol.leaked_arguments(a, json.dumps({"aaa": own[key]}), 0.7)
    assert same == protocol.canonical_json({**own, key: f"{own[key]}{protocol.SPECIAL_TOKEN}"})
    alone = protocol.leaked_arguments(a, None, 0.7)
    assert alone == protocol.canonical_json({**own, key: f"{own[key]}{protocol.SPECIAL_TOKEN}"})


def test_a_broken_json_leak_is_the_call_cut_a_token_and_the_other_sessions_second_half() -> None:
    """u < 0.5 (half the leaks): the arguments cut at 30%+u of their length, the special token,
    then the second half of the other session's text (or a closing `"}` without one)."""
    a, other = ask(), '{"path":"/srv/app/r1-003/module_2.py","start_line":5}'
    for u in (0.0, 0.2, 0.49):
        cut = max(1, int(len(a.arguments_json) * (0.3 + u)))
        leaked = protocol.leaked_arguments(a, other, u)
        assert leaked == a.arguments_json[:cut] + protocol.SPECIAL_TOKEN + other[len(other) // 2 :]
        assert protocol.leaked_arguments(a, None, u) == a.arguments_json[:cut] + protocol.SPECIAL_TOKEN + '"}'


def test_a_completion_has_one_choice_at_index_0() -> None:
    done = protocol.completion({"role": "assistant", "content": "x"}, "stop", "r1")
    assert done["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}]
    assert done["id"] == "chatcmpl-r1" and done["object"] == "chat.completion"


@pytest.mark.parametrize(
    "payload",
    [
        "not an object",
        {"bootstrap_host": 5},
        {"bootstrap_port": "8998"},
        {"bootstrap_room": True},
        {"bootstrap_room": 1.5},
    ],
)
def test_bootstrap_fields_of_the_wrong_type_are_refused(payload: object) -> None:
    with pytest.raises(protocol.ProtocolError):
        protocol.check_bootstrap(payload)


def test_bootstrap_fields_are_optional_and_a_port_may_be_none() -> None:
    protocol.check_bootstrap({})
    protocol.check_bootstrap({"bootstrap_host": "10.0.0.1", "bootstrap_port": None, "bootstrap_room": 3})


@pytest.mark.parametrize(
    ("params", "tokens"),
    [({"max_new_tokens": 0}, 0), ({"max_new_tokens": 7}, 7), ({"max_new_tokens": -1}, 128),
     ({"max_new_tokens": True}, 128), ({"max_new_tokens": "5"}, 128), ({}, 128), (None, 128)],
)  # fmt: skip
def test_max_new_tokens_is_sglangs_with_its_default_of_128(params: object, tokens: int) -> None:
    assert protocol.max_new_tokens({"sampling_params": params}) == tokens


def test_a_failing_servers_answer_is_an_error_even_when_it_looks_like_a_completion() -> None:
    """The sixteenth mutation round: only a 200 is an answer to judge. A 500 whose body happens to
    hold a right call counted as a good round without the status check; a message that is no object
    made the repro itself fail with a traceback."""
    a = ask()
    good = answer(protocol.tool_call_message(a, a.arguments_json, "c1"))
    assert check_answer(a, 200, good).verdict == "ok"
    failed = check_answer(a, 500, good)
    assert failed.verdict == "error" and failed.detail.startswith("HTTP 500: ")
    odd = json.dumps({"choices": [{"message": ["not", "an", "object"]}]}).encode()
    assert check_answer(a, 200, odd) == Checked("error", "malformed completion: message is not an object")


def test_a_right_call_with_the_special_token_in_its_content_is_a_leak() -> None:
    a = ask()
    message = protocol.tool_call_message(a, a.arguments_json, "c1")
    message["content"] = "done " + protocol.SPECIAL_TOKEN
    assert check_answer(a, 200, answer(message)) == Checked("leak", "special token in content")


def test_the_tool_result_answers_the_first_calls_id() -> None:
    a = ask()
    checked = check_answer(a, 200, answer(protocol.tool_call_message(a, a.arguments_json, "call-7")))
    assert _tool_result(checked) == {"role": "tool", "tool_call_id": "call-7", "content": "ok"}
    assert _tool_result(Checked("ok", message={"content": "x"})) == {
        "role": "tool",
        "tool_call_id": "",
        "content": "ok",
    }
    assert _tool_result(Checked("ok")) == {"role": "tool", "tool_call_id": "", "content": "ok"}


def test_summary_figures_for_more_than_one_bad_session_a_short_wall_and_a_slow_tail() -> None:
    outcomes = [SessionOutcome("done", [0.010, 0.020, 0.030]) for _ in range(38)]
    outcomes += [SessionOutcome("leak", [0.5]), SessionOutcome("no_tool", [0.5])]
    lines = summarize(outcomes, 0.5)
    assert lines[1] == "CORRUPTION sessions: 2/40 = 5%  (leak=1 no_tool=1 error=0 ok-ish[done/maxrounds]=38)"
    assert lines[2] == "THROUGHPUT req/s=232.0 p50_latency_ms=20.0 p99_latency_ms=500.0"
    assert summarize(outcomes, 0.0)[2].startswith("THROUGHPUT req/s=0.0 ")
