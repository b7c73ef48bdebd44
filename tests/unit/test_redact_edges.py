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
