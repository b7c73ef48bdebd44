"""Webhook notifications when a sweep ends (EDGE): a JSON summary POSTed to each configured URL.

Where URLs come from: a queue item's own list, `--webhook URL` on the command, and the
ORCH_WEBHOOKS environment variable (separated by blanks or commas). A URL written
`slack+https://...` gets a Slack-compatible body ({"text": ...}) posted to `https://...`, its
text escaped and bounded (chat_safe: a level named `<!channel>` must not ping a channel). The
generic JSON body is bounded too (Summary.json_body: at most BODY_MAX_BYTES, whatever the run
folder holds): a receiver is a chat bridge or a small service, not a store of whole run folders.

Why a failing webhook never fails the sweep: the run and its report are the result; a message is
a courtesy. Each POST is retried (tenacity, exponential backoff) on connection errors, 429 and
5xx, then given up on with a one-line warning. URLs are shown without their path or query,
because a webhook URL usually is its own secret (Slack's are).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence
from urllib.parse import SplitResult, quote, urlsplit

import httpx
import tenacity

from orchestrator.core.clip import clip, clip_list
from orchestrator.core.endpoints import LOOPBACK, canonical_host
from orchestrator.core.words import counted
from orchestrator.edges.httpread import HttpAnswerError, request
from orchestrator.errors import OrchError, UsageError
from orchestrator.store.liveness import not_restored_line, read_status, recorded_restore
from orchestrator.store.rundir import INDEX_HTML, RunDir

ENV_VAR = "ORCH_WEBHOOKS"
BASE_URL_VAR = "ORCH_REPORTS_URL"  # e.g. http://orch.lab:8765: links point at `orch serve`
SLACK_PREFIX = "slack+"
TIMEOUT_S = 5.0
ATTEMPTS = 3
BODY_MAX_BYTES = 64 * 1024  # the generic JSON body, encoded, whatever the run folder holds
ITEMS_SHOWN = 20  # of each list in the JSON body (suspect reasons, changes, roles); the rest counted
# characters of each free-text field of the JSON body (the Slack text's caps, about)
JSON_CAPS = {
    "run_id": 300,
    "name": 300,
    "status": 40,
    "headline": 2000,
    "adaptive": 1000,
    "suspect": 600,
    "changes": 400,
}
ROLE_CAP = 200  # one role of not_restored (`TESTBED/role`)


@dataclass(frozen=True)
class Summary:
    """What every webhook receives (the generic JSON body, field for field)."""

    run_id: str
    name: str
    status: str  # completed, failed, interrupted (resumable), stale (controller gone), error (could not run)
    headline: str
    link: str
    trials: int  # finished trials (completed + failed)
    failed: int
    planned: int | None = 0  # None for a hunt: its search decides its trials as it goes
    # why the data is suspect (void/failed trials, drift, overdispersion); a list: the JSON body's shape
    suspect: list[str] = field(default_factory=list)
    # cells and metrics that changed against the earlier runs of the matrix (the nightly check)
    changes: list[str] = field(default_factory=list)
    # roles the run's restore left changed (its status.json, as the index and `orch status` show
    # them) and the command that puts them back; empty once `orch restore` did
    not_restored: list[str] = field(default_factory=list)
    restore_with: str = ""
    adaptive: str = ""  # an adaptive run's sequential decisions (Report.adaptive): the page opens with them

    def text(self) -> str:
        """One line for people (the message's words, unescaped): the result beside the status,
        hosts left changed right after the status (what a teammate must see first), and a warning
        when the data is suspect."""
        return " - ".join(p for p in self._parts(lambda text, cap: text) if p)

    def chat_text(self) -> str:
        """text() as the Slack variant posts it: escaped and bounded by chat_safe, part by part,
        so a long headline cannot push the suspect warning or the link out of the message."""
        return " - ".join(p for p in self._parts(chat_safe) if p)

    def json_body(self) -> dict[str, object]:
        """The generic webhook's body: every field, each free text cut to its JSON_CAPS (an
        ellipsis shows the cut) and each list to its first ITEMS_SHOWN items and `… and N more`,
        the caps quartered until the encoded body fits BODY_MAX_BYTES (a text of control
        characters is encoded six bytes a character). The link and the restore command are never
        cut: orch built both (a base URL and a folder name; a command and a path, bounded by
        summarize_run). A 1 MB matrix name and 5,000 flagged cells were posted whole (1.7 MB)."""
        for shrink in (1, 4, 16, 64):
            body = self._clipped(shrink)
            if len(json_bytes(body)) <= BODY_MAX_BYTES:
                break
        return body

    def _clipped(self, shrink: int) -> dict[str, object]:
        def cap(key: str) -> int:
            return max(JSON_CAPS[key] // shrink, 8)

        shown = max(ITEMS_SHOWN // shrink, 1)
        return {
            **asdict(self),
            **{key: clip(getattr(self, key), cap(key)) for key in ("run_id", "name", "status", "headline", "adaptive")},
            "suspect": clip_list(self.suspect, shown, cap("suspect")),
            "changes": clip_list(self.changes, shown, cap("changes")),
            "not_restored": clip_list(self.not_restored, shown, max(ROLE_CAP // shrink, 8)),
        }

    def _parts(self, fit: Callable[[str, int | None], str]) -> list[str]:
        head = f"orch {fit(self.name, 120)} ({fit(self.run_id, 80) or 'not started'}): {fit(self.status, 40)}"
        roles = [fit(", ".join(self.not_restored), 600)]  # cut the roles, never the command that restores them
        left = not_restored_line(roles, "", fit(self.restore_with, None)) if self.not_restored else ""
        of = "" if self.planned is None else f"/{self.planned}"  # a hunt has no planned total
        counts = f"{self.trials}{of} trials, {self.failed} failed" if self.planned != 0 else ""
        warning = f"SUSPECT DATA: {'; '.join(self.suspect)}" if self.suspect else ""
        changed = f"CHANGED vs earlier runs: {'; '.join(self.changes)}" if self.changes else ""
        return [
            head,
            left,
            counts,
            fit(self.headline, 2000),
            fit(self.adaptive, 1000),
            fit(warning, 600),
            fit(changed, 600),
            fit(self.link, None),  # never cut: orch built it (a base URL, a folder name)
        ]


# Slack reads `<...>` in a message as a mention or a link (`<!channel>` pings a whole channel,
# `<https://x|report>` hides where a link goes) and `&` as an entity: its documentation asks that
# these three be escaped. A run's name and a level's name may hold them (a level is any text
# without `,`, `=` or a control character), and run.json may hold anything.
_CHAT_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
_CONTROLS = re.compile(r"[\x00-\x1f\x7f]+")  # a line break would start a line the message never wrote


def chat_safe(text: str, cap: int | None) -> str:
    """text as a chat message may carry it: control characters as a blank, & < > escaped, and at
    most `cap` characters (cut with an ellipsis, never inside an escape; None: whole). The caps of
    Summary.chat_text keep a message under ~5,000 characters plus its link, whatever the run
    folder holds (Slack advises at most 4,000 and truncates past 40,000; a 1 MB matrix name was posted whole)."""
    safe = _CONTROLS.sub(" ", text).translate(_CHAT_ESCAPES)
    if cap is None or len(safe) <= cap:
        return safe
    return re.sub(r"&[a-z]*$", "", safe[: cap - 1]) + "…"


@dataclass(frozen=True)
class Webhook:
    url: str  # where to POST
    slack: bool = False

    @classmethod
    def parse(cls, text: str) -> "Webhook":
        """The webhook `text` names, checked whole (scheme, host, port, what httpx accepts): a URL
        let through here failed later, in a queue listing or after a sweep, with a traceback."""
        text = text.strip()
        slack = text.startswith(SLACK_PREFIX)
        url = text[len(SLACK_PREFIX) :] if slack else text
        problem = _url_problem(url)
        if problem:
            label = shown(text)  # scheme and host only: a path may be a token
            raise UsageError(
                f"webhook {label if label == NOT_A_URL else repr(label)}: {problem}",
                hint="write https://host/path, or slack+https://hooks.slack.com/... for Slack",
            )
        return cls(url, slack)

    def body(self, summary: Summary) -> dict[str, object]:
        return {"text": summary.chat_text()} if self.slack else summary.json_body()


def json_bytes(body: object) -> bytes:
    """body as httpx encodes a `json=` request (compact, UTF-8): what a receiver is sent."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


@dataclass(frozen=True)
class Delivery:
    webhook: str  # shown form (no path, no query)
    ok: bool
    attempts: int
    error: str = ""


def _url_problem(url: str) -> str:
    """Why url cannot be POSTed to, '' when it can. The messages never quote the URL's parts."""
    if not _has_scheme(url):
        half = re.match(r"https?:", url, re.IGNORECASE)  # `https:/host`, `http:host`
        return "needs :// after its scheme" if half else "missing https:// at the start"
    try:
        parts = urlsplit(url)
    except ValueError:
        return "not a URL (an unclosed [ or an invalid IPv6 address?)"
    if not parts.hostname and parts.scheme in ("http", "https"):
        return f"no host after {parts.scheme}://"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http(s) URL"
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if port == 0:
        return "its port is not a number from 1 to 65535"
    try:
        if not httpx.URL(url).host:  # the host as httpx will send it (IDNA): its errors are ValueErrors
            return "not an http(s) URL"
    except (httpx.InvalidURL, ValueError):
        return "not a URL httpx can use (an invalid host name or character)"
    return ""


NOT_A_URL = "(not a URL)"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
# a host name (labels, a letters-only top level) or an IPv4 address, an optional port: what a
# text without `scheme://` may show of itself; anything else may be a token pasted by mistake
_HOST_LIKE = re.compile(r"(?:localhost|(?:[A-Za-z0-9-]{1,63}\.)+[A-Za-z]{2,63}|\d{1,3}(?:\.\d{1,3}){3})(?::\d{1,5})?")


def shown(url: str) -> str:
    """scheme://host[:port]/… : enough to tell which hook, not enough to use it. Never raises: a
    URL stored before it was checked whole (in a queue) is still listed. A text without a
    scheme (`hooks.example.com/T0/…`, `not-a-url`) shows its host when it starts with one, else
    NOT_A_URL: never `:///…`, and never a word that may be the secret itself."""
    if not _has_scheme(url):
        prefix = SLACK_PREFIX if url.startswith(SLACK_PREFIX) else ""
        rest = url[len(prefix) :]
        host = re.split(r"[/?#]", rest, maxsplit=1)[0]
        if not _HOST_LIKE.fullmatch(host):  # a user (`u:pw@`), a bare word or a token
            return NOT_A_URL
        return prefix + host + ("/…" if len(rest) > len(host) + 1 or rest.endswith(("?", "#")) else "")
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed [: what urlsplit would call the host, without its user
        scheme, _, rest = url.partition("://")
        host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
        return f"{scheme}://{host}/…"
    tail = "/…" if parts.path not in ("", "/") or parts.query else ""
    return f"{parts.scheme}://{parts.hostname or ''}{f':{_port(parts)}' if _port(parts) else ''}{tail}"


def _has_scheme(url: str) -> bool:
    """`scheme://` at the start (`slack+` already taken off, or part of the scheme)."""
    scheme, sep, _ = url.partition("://")
    return bool(sep) and _SCHEME.fullmatch(scheme) is not None


def _port(parts: SplitResult) -> int | None:
    """The port, None when there is none or it cannot be read (shown without it)."""
    try:
        return parts.port
    except ValueError:
        return None


def configured(*lists: Iterable[str], environ: dict[str, str] | None = None) -> list[Webhook]:
    """Every webhook from the given lists and ORCH_WEBHOOKS, each once, in order."""
    env = os.environ if environ is None else environ
    texts = [t for lst in lists for t in lst] + re.split(r"[\s,]+", env.get(ENV_VAR, ""))
    seen: dict[str, Webhook] = {}
    for text in filter(None, (t.strip() for t in texts)):
        seen.setdefault(text, Webhook.parse(text))
    return list(seen.values())


def plain_http(hooks: Iterable[Webhook]) -> list[str]:
    """A warning for each http:// webhook to another machine: the run's summary, and a token in
    the URL's path (how chat webhooks authenticate), cross the network unencrypted. Allowed (a lab
    receiver without TLS), but said once, when it is given; loopback is this machine's own."""
    out = []
    for hook in hooks:
        parts = urlsplit(hook.url)
        if parts.scheme == "http" and canonical_host(parts.hostname or "") != LOOPBACK:
            out.append(
                f"webhook {shown(hook.url)!r}: plain http to another machine: the summary and any token in "
                "the URL cross the network unencrypted (use https:// where the receiver has it)"
            )
    return out


def summarize_run(run_dir: Path, *, base_url: str | None = None) -> Summary:
    """The summary of a run directory: status, counts, the result sentence and the reasons to doubt
    the data, from the report's own model of the run on disk (report.render), so every word and
    number is the report's; a damaged journal is refused as the report refuses it (a ConfigError
    at journal.jsonl:<line>), never summarized.

    Counts are of trials, by store.runtrials' rule: `trials` finished (completed, or failed for
    good), `failed` those that failed for good; trials - failed is the report's completed count.
    A trial left unfinished (interrupted, or a failed attempt marked `retried` whose retry a kill
    cut off) is neither: `orch resume` runs it again. Its attempts are among the report's failed
    attempts, which the suspect reasons count."""
    # the report stack (pandas, scipy): only when sending
    from orchestrator.report.build import result_headline, suspect_reasons
    from orchestrator.report.render import load_report_and_rows
    from orchestrator.store.runtrials import trial_rows

    report, rows = load_report_and_rows(run_dir, drilldown_cap=0)
    finished = trial_rows(rows)
    left = read_status(run_dir)  # the hosts its restore left changed: the index's and status's source
    return Summary(
        run_id=report.run_id,
        name=report.name,
        status=report.status,
        headline=result_headline(report),
        adaptive=report.adaptive,
        link=link(run_dir, base_url),
        trials=len(finished),
        failed=sum(row.status == "failed" for row in finished),
        planned=report.planned,
        suspect=suspect_reasons(report),
        changes=_changes(run_dir),
        not_restored=list(left.not_restored) if left else [],
        restore_with=recorded_restore(left.restore_with, run_dir.absolute()) if left and left.not_restored else "",
    )


def _changes(run_dir: Path) -> list[str]:
    """The nightly regression check's flagged changes (never fails the summary)."""
    from orchestrator.report.render import fresh_summary
    from orchestrator.report.site import regression_changes
    from orchestrator.report.trends import change_text

    try:
        return [change_text(c) for c in regression_changes(run_dir, fresh_summary) if c.flagged]
    except OrchError:
        return []


def link(run_dir: Path, base_url: str | None = None) -> str:
    base = base_url if base_url is not None else os.environ.get(BASE_URL_VAR, "")
    if base:
        return f"{base.rstrip('/')}/{quote(run_dir.name)}/{INDEX_HTML}"
    return RunDir(run_dir.resolve()).index_html.as_uri()


def error_summary(name: str, message: str) -> Summary:
    """For a queued sweep that could not start (bad matrix, unreachable host)."""
    return Summary(run_id="", name=name, status="error", headline=message, link="", trials=0, failed=0)


SWEEP_UNAFFECTED = "(the sweep itself is unaffected)"  # after a sweep's failed delivery, never `orch notify`'s


def send(
    summary: Summary,
    webhooks: Sequence[Webhook],
    *,
    client: httpx.Client | None = None,
    warn: Callable[[str], None] = lambda m: None,
    backoff_s: float = 0.5,
) -> list[Delivery]:
    """POST the summary to every webhook; never raises (failures are returned and warned; a caller
    after a sweep adds that the sweep is unaffected, `orch notify` has none)."""
    own = client is None
    # trust_env: the environment's proxy, NO_PROXY and CA bundle, as curl reads them (a lab reaches Slack
    # through its proxy); orch's own health and metrics clients keep to the hosts directly
    client = client or httpx.Client(timeout=TIMEOUT_S, trust_env=True, follow_redirects=False)
    try:
        deliveries = [_deliver(client, hook, summary, backoff_s) for hook in webhooks]
    finally:
        if own:
            client.close()
    for d in deliveries:
        if not d.ok:
            warn(f"webhook {d.webhook}: not delivered after {counted(d.attempts, 'attempt')}: {d.error}")
    return deliveries


class _Retryable(Exception):
    """A failure worth another try (connection error, 429, 5xx)."""


def _deliver(client: httpx.Client, hook: Webhook, summary: Summary, backoff_s: float) -> Delivery:
    attempts = 0

    def post() -> None:
        nonlocal attempts
        attempts += 1
        try:  # only the reply's status counts: none of its body is read, and it ends within TIMEOUT_S
            response = request(
                client, "POST", hook.url, deadline_s=TIMEOUT_S, max_bytes=0, json_body=hook.body(summary)
            )
        except HttpAnswerError as exc:
            raise _Retryable(exc.problem) from exc  # its message without the URL: a webhook URL is a secret
        except (httpx.InvalidURL, ValueError) as exc:  # not HTTPErrors; no retry helps; their texts quote the URL
            raise OrchError(f"not a usable URL ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise _Retryable(f"{type(exc).__name__}: {exc}".splitlines()[0]) from exc
        if response.status == 429 or response.status >= 500:
            raise _Retryable(f"HTTP {response.status}")
        if response.status >= 300:
            raise OrchError(f"HTTP {response.status}")

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(ATTEMPTS),
        wait=tenacity.wait_exponential(multiplier=backoff_s, max=5 * backoff_s + 0.01),
        retry=tenacity.retry_if_exception_type(_Retryable),
        reraise=True,
    )
    try:
        retrying(post)
    except (_Retryable, OrchError) as exc:
        return Delivery(shown(hook.url), False, attempts, str(exc))
    return Delivery(shown(hook.url), True, attempts)
