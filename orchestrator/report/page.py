"""What every HTML page orch writes shares: the jinja2 environment and the Content-Security-Policy.

Why a module of its own: the report, the runs index, the comparison page and `orch serve`'s status
page are built from the same templates with the same rules (autoescape on for every value, a
policy that allows only the page's own script, by hash, and nothing from any URL; see render.py
for why). The index and the status page need only this, not the report build above it.
"""

from __future__ import annotations

import base64
import functools
import hashlib

import jinja2
from markupsafe import Markup, escape

from orchestrator.core.words import counted


def csp(script: str) -> str:
    """Nothing from any URL; only the page's own script (by hash) and inline styles (SVG needs them)."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; "
        f"script-src 'sha256-{digest}'; "
        "style-src 'unsafe-inline'; img-src data:; "
        "base-uri 'none'; form-action 'none'"
    )


def new_environment() -> jinja2.Environment:
    """The templates in orchestrator/report/templates, every value escaped, an undefined name an
    error; `{{ n | counted("run") }}` says "1 run" / "3 runs" on every page (core.words)."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("orchestrator.report", "templates"),
        autoescape=True,  # always: the templates end in .j2, which select_autoescape would miss
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["counted"] = counted
    env.filters["code_spans"] = code_spans
    return env


def code_spans(text: str) -> Markup:
    """`text` escaped, each pair of backticks made <code>: a headline's words are shared with the
    terminal and webhooks, where backticks set a command apart ("`orch resume` continues it"),
    and the page showed them as they are. A last backtick without its pair stays one."""
    parts = str(escape(text)).split("`")
    if len(parts) % 2 == 0:  # an odd number of backticks: the last is text
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    return Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)))


@functools.cache
def environment() -> jinja2.Environment:
    """The one shared environment of the process (new_environment's). Why cached: a new Environment
    compiles every template it loads again (report.html.j2: ~60 ms), and the runs index and the
    team's status pages were each built with a fresh one. Jinja2 environments are safe to share
    between threads once configured, and nothing configures this one after it is made (render
    adds its number filters to an environment of its own)."""
    return new_environment()
