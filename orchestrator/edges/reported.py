"""What a live server reports about itself, checked against a matrix's `verify:` rules (EDGE).

An env var reaching the process (/proc/PID/environ) does not prove the server applied it: a flag
passed through SGLANG_EXTRA_ARGS, a value the server ignores with a warning. The server's own
report (/server_info; older SGLang /get_server_info) does. A mismatch raises ReportedMismatch, a
VerificationError, so the trial is void exactly like an env mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

import httpx

from orchestrator.core.serverconf import VerifyRule, missing_words, reported_mismatch
from orchestrator.edges.httpread import HttpAnswerError, NotJson, get_json
from orchestrator.errors import MISSING, ReportedMismatch, VerificationError

TIMEOUT_S = 5.0
OLD_PATHS = {"/server_info": "/get_server_info", "/model_info": "/get_model_info"}  # SGLang before the rename


def check_reported(rules: list[VerifyRule], role: str, label: str, url: str, client: httpx.Client) -> None:
    """Check the rules of one role against the server at `url` (its base URL)."""
    answers: dict[str, object] = {}
    for rule in rules:
        if rule.path not in answers:
            answers[rule.path] = fetch(url, rule.path, label, client)
        found = reported_mismatch(answers[rule.path], rule)
        if found is not None:
            field, want, got = found
            raise ReportedMismatch(
                f"{label}: {rule.path} ({rule.where})",
                field,
                want,
                got,
                hint=missing_words(answers[rule.path], rule, field) if got is MISSING else ignored_words(rule),
            )


def ignored_words(rule: VerifyRule) -> str:
    """Why a field reported with another value voids the trial, at the rule's line."""
    return f"{rule.at + ': ' if rule.at else ''}the server did not apply the cell's setting; the trial is void"


def fetch(url: str, path: str, label: str, client: httpx.Client) -> object:
    """The JSON a `verify:` path answers (or its pre-rename name), read within TIMEOUT_S in all and
    MAX_JSON_BYTES; any other answer is a VerificationError: the trial is void, not the sweep."""
    base = url.rstrip("/")
    tried = [path] + ([OLD_PATHS[path]] if path in OLD_PATHS else [])
    last = ""
    for p in tried:
        try:
            status, value = get_json(client, base + p, deadline_s=TIMEOUT_S)
        except (HttpAnswerError, NotJson) as exc:
            raise VerificationError(f"{label}: {exc}") from None
        except httpx.HTTPError as exc:
            raise VerificationError(
                f"{label}: {base + p}: cannot ask the server: {exc or type(exc).__name__}"
            ) from None
        if status == 404:
            last = f"{base + p}: HTTP 404"
            continue
        if status != 200:
            raise VerificationError(f"{label}: {base + p}: HTTP {status}")
        return value
    raise VerificationError(f"{label}: {last} (no {' or '.join(tried)} on this server)")


def rules_by_role(rules: tuple[VerifyRule, ...], levels: Mapping[str, str]) -> dict[str, list[VerifyRule]]:
    out: dict[str, list[VerifyRule]] = {}
    for rule in rules:
        if rule.applies_to(levels):
            out.setdefault(rule.role, []).append(rule)
    return out


def base_url(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"
