"""The Redactor (core.redact) at edges where a secret could reach a page or a webhook: a sweep's
known secret value of six characters (MIN_KNOWN_VALUE) is masked in free text (one shorter is
not: it would mask "1"), and printing a Redactor never shows the values it masks.

Found by mutation testing (bench/mutants.py, round two): the limit one higher and the known
values' pattern in the Redactor's repr each left every test green.
"""

from __future__ import annotations

from orchestrator.core.redact import REDACTED, Redactor


def test_a_known_value_of_the_minimum_length_is_masked_one_shorter_is_not() -> None:
    value = "s3cr3t"  # six characters: a short password is still a password
    redactor = Redactor.for_names(["HUB_AUTH"], [value, value[:-1]])
    assert redactor.text(f"echo {value} done") == f"echo {REDACTED} done"
    assert redactor.text(f"echo {value[:-1]} done") == f"echo {value[:-1]} done"


def test_a_redactors_repr_shows_the_declared_names_never_the_known_values() -> None:
    shown = repr(Redactor.for_names(["HUB_AUTH"], ["s3cr3t-value-42"]))
    assert "HUB_AUTH" in shown and "s3cr3t" not in shown


def test_masking_a_masked_text_again_keeps_it_as_it_is() -> None:
    """A report re-renders journal lines masked when written: the mask must stay, not vanish."""
    text = "curl -H 'Authorization: Bearer hf_AbCdEfGhIjKlMnOpQrSt' and bearer abcdefghijk"
    once = Redactor().text(text)
    assert once == f"curl -H 'Authorization: Bearer {REDACTED}' and bearer {REDACTED}"
    assert Redactor().text(once) == once


def test_a_text_naming_every_secret_word_still_has_its_assignments_masked() -> None:
    """The name patterns run only on a text holding one of the secret words (a cheap skip): one
    holding all of them must not skip them (round ten: `word not in lowered` survived, which skips
    exactly such a text, e.g. a repro's help output listing its token, key, secret, password and
    credential options beside the run's own --api-key)."""
    text = "options: token, key, secret, password, credential; ran with API_KEY=hunter2hunter2"
    assert Redactor().text(text) == f"options: token, key, secret, password, credential; ran with API_KEY={REDACTED}"
