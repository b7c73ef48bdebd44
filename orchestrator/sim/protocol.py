"""The wire format shared by the simulated decode server and the repro client (PURE).

Requests are OpenAI chat completions with ``tools``. The last user message of each round says
which tool to call with which arguments (``Step 2 of 3: call tool `grep` with arguments {...}``),
the way the real agent repro's prompts pin down the expected call, so the client can check the
answer exactly and the server knows what a correct answer is. The session id travels in the
OpenAI ``user`` field and in ``metadata.session_id`` (the real router drops ``user``). Arguments
embed the session id, so text leaked from another session shows up as wrong values.
"""

from __future__ import annotations

import json
import random
import re
from typing import NamedTuple

from orchestrator.sim import VERSION

MODEL_NAME = "sim-dsv4"
SPECIAL_TOKEN = "<｜tool▁call▁end｜>"  # DSV4's tool-call end token, seen in real leaks
DONE_MARKER = "DONE"  # the model's note on its final call: "the task is complete"

TOOL_NAMES: tuple[str, ...] = ("read_file", "grep", "run_tests", "edit_file")

_INSTRUCTION = re.compile(r"Step (\d+) of (\d+): call tool `(\w+)` with arguments (\{.*\})\s*\Z", re.DOTALL)


class ProtocolError(ValueError):
    """A request the simulated model cannot understand (HTTP 400)."""


class ToolAsk(NamedTuple):
    """What one round of a session asks the model to do."""

    session: str
    round: int  # 1-based
    rounds: int
    tool: str
    arguments_json: str  # canonical JSON (sorted keys, compact)

    @property
    def is_final(self) -> bool:
        return self.round >= self.rounds

    def instruction(self) -> str:
        return f"Step {self.round} of {self.rounds}: call tool `{self.tool}` with arguments {self.arguments_json}"


def canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def make_ask(rng: random.Random, session: str, round_: int, rounds: int) -> ToolAsk:
    """A random but reproducible tool call for this session and round."""
    tool = rng.choice(TOOL_NAMES)
    n = rng.randrange(1, 400)
    by_tool: dict[str, dict[str, object]] = {
        "read_file": {"path": f"/srv/app/{session}/module_{round_}.py", "start_line": n},
        "grep": {"pattern": f"TODO-{session}-{n}", "path": f"/srv/app/{session}"},
        "run_tests": {"target": f"tests/test_{session}_{round_}.py", "verbose": n % 2 == 0},
        "edit_file": {"path": f"/srv/app/{session}/fix_{n}.py", "content": f"x = {n}\n"},
    }
    return ToolAsk(session, round_, rounds, tool, canonical_json(by_tool[tool]))


def tool_specs() -> list[dict[str, object]]:
    """The OpenAI ``tools`` list sent with every request."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"simulated tool {name}",
                "parameters": {"type": "object", "additionalProperties": True},
            },
        }
        for name in TOOL_NAMES
    ]


def context_filler(tokens: int) -> str:
    """About `tokens` tokens of prompt context (one short word ~ one token)."""
    words = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")
    return " ".join(words[i % len(words)] for i in range(tokens))


def parse_ask(body: object) -> ToolAsk:
    """Find what the request asks for: session from ``user``, the call from the last user turn."""
    if not isinstance(body, dict):
        raise ProtocolError("request body must be a JSON object")
    session = session_of(body)
    messages = body.get("messages")
    if session is None or not isinstance(messages, list):
        raise ProtocolError("request needs a session id ('user' or metadata.session_id) and 'messages'")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    match = _INSTRUCTION.search(content) if isinstance(content, str) else None
    if match is None:
        raise ProtocolError("last user message has no 'Step i of n: call tool ...' instruction")
    round_, rounds, tool, raw_args = match.groups()
    try:
        args = json.loads(raw_args)
    except ValueError as exc:
        raise ProtocolError(f"instruction arguments are not JSON: {exc}") from exc
    return ToolAsk(session, int(round_), int(rounds), tool, canonical_json(args))


def session_of(body: dict[str, object]) -> str | None:
    """The session id: OpenAI's ``user`` field, else ``metadata.session_id``. The real PD router
    (sglang-router 0.3.2) drops ``user`` when it re-serialises a chat request but keeps
    ``metadata``, so the repro sends both."""
    session = body.get("user")
    if isinstance(session, str):
        return session
    metadata = body.get("metadata")
    session = metadata.get("session_id") if isinstance(metadata, dict) else None
    return session if isinstance(session, str) else None


def leaked_arguments(ask: ToolAsk, other: str | None, u: float) -> str:
    """Arguments corrupted by text from another sequence of the batch (or a special token).

    Half the leaks break the JSON (a special token and another session's text spliced in),
    half stay valid JSON but carry another session's values."""
    if u < 0.5:
        cut = max(1, int(len(ask.arguments_json) * (0.3 + u)))
        tail = other[len(other) // 2 :] if other else '"}'
        return ask.arguments_json[:cut] + SPECIAL_TOKEN + tail
    args = json.loads(ask.arguments_json)
    key = sorted(args)[0]
    if other is not None:
        foreign = json.loads(other)
        args[key] = foreign[sorted(foreign)[0]]
    if other is None or args == json.loads(ask.arguments_json):
        args[key] = f"{args[key]}{SPECIAL_TOKEN}"
    return canonical_json(args)


def completion(message: dict[str, object], finish_reason: str, request_id: str) -> dict[str, object]:
    return {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion",
        "model": MODEL_NAME,
        "system_fingerprint": VERSION,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


def tool_call_message(ask: ToolAsk, arguments: str, call_id: str) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": DONE_MARKER if ask.is_final else None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": ask.tool, "arguments": arguments},
            }
        ],
    }


def text_message(ask: ToolAsk) -> dict[str, object]:
    """The "no_tool" failure: the model answers in prose and never calls the tool."""
    return {
        "role": "assistant",
        "content": f"I looked into step {ask.round}; `{ask.tool}` does not seem necessary.",
    }


# ---- the SGLang worker API around the chat format (what the real PD router sends and reads) ----


def check_bootstrap(payload: object) -> None:
    """The fields a PD router adds to every request (bootstrap_host, bootstrap_port,
    bootstrap_room) are optional, but when present they must have SGLang's types."""
    if not isinstance(payload, dict):
        raise ProtocolError("request body must be a JSON object")
    kinds: dict[str, tuple[type, ...]] = {
        "bootstrap_host": (str,),
        "bootstrap_port": (int, type(None)),
        "bootstrap_room": (int,),
    }
    for key, allowed in kinds.items():
        value = payload.get(key)
        if key in payload and (not isinstance(value, allowed) or isinstance(value, bool)):
            raise ProtocolError(f"{key} must be {' or '.join(t.__name__ for t in allowed)}, got {value!r}")


def max_new_tokens(payload: dict[str, object]) -> int:
    """sampling_params.max_new_tokens of a /generate request (SGLang's default: 128)."""
    params = payload.get("sampling_params")
    value = params.get("max_new_tokens") if isinstance(params, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 128


def generate_answer(request_id: str, prompt_tokens: int, completion_tokens: int) -> dict[str, object]:
    """SGLang's /generate answer shape: text plus meta_info."""
    return {
        "text": " ok" * completion_tokens,
        "meta_info": {
            "id": request_id,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "finish_reason": {"type": "length", "length": completion_tokens},
        },
    }


def model_info() -> dict[str, object]:
    """/model_info without model_path or tokenizer_path: given one, the real router tries to load
    a tokenizer for it (a download attempt, offline a warning)."""
    return {"is_generation": True, "model_type": MODEL_NAME, "weight_version": VERSION}
