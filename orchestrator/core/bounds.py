"""Bounds on numbers a user gives both as matrix keys and as CLI options (--replicates, --retries,
--seed), and on counts read back from files (sessions), in a module that imports nothing: the
CLI's parser checks them without loading the config models (pydantic, YAML) that `orch --help`
never needs, and the report's summary reader without depending on the config."""

MAX_REPLICATES = 100_000
MAX_RETRIES = 10
MAX_SEED = 2**64 - 1
MAX_SESSIONS = 10**9  # a proportion's n: what a validity rule may ask for, what a summary may hold
# Testbeds one run uses at once (`-t all`, `-t A,B,...`): each is a runner thread, its hosts'
# connections, a lock and a backup taken one after the other before the first trial (~0.3 s each
# on local testbeds; 1,000 took minutes before any trial ran). A real PD testbed is a GPU group:
# a few dozen is a large cluster. An inventory may list more; a run picks at most this many.
MAX_TESTBEDS = 256

# Linux execs an argument or an environment entry (`KEY=value`) of at most 32 pages, 128 KiB with
# its NUL (MAX_ARG_STRLEN); a longer one fails execve() with E2BIG. A repro runs as `sh -c COMMAND`
# and a unit gets each env-file value as one entry, so a longer command or value would fail every
# trial after the hosts were edited and restarted: both are refused before anything runs.
MAX_ARG_BYTES = 128 * 1024 - 1
MAX_TEMPLATE_CHARS = 16 * 1024  # a command as written in the matrix (a real one is a few hundred)
# A command once its placeholders are filled in, for a cell's first trial: half the kernel's limit,
# so the per-trial values ({trial}, {trial_seed}, {trial_dir} with an attempt suffix: at most ~20
# characters more each) of a template of MAX_TEMPLATE_CHARS still stay under it.
MAX_COMMAND_BYTES = 64 * 1024
# What a value over that bound is told, wherever it is found (the matrix, an edit of an env file).
ENV_ENTRY_TOO_LONG = (
    "Linux starts a process with an environment entry (KEY=value) of at most 128 KiB, so the unit would fail "
    "to start (Argument list too long)"
)
ENV_ENTRY_HINT = "pass a large setting through a file the server reads"

# A metric's `unit:` ("s", "tok/s", "MiB"): user text shown beside every value on the pages, in
# table headers and chart axes, so a short printable word. 16 characters holds "tokens/s/GPU";
# a sentence or a control character (a newline, an escape, a bidi override) is a mistake.
MAX_UNIT_CHARS = 16


def unit_problem(unit: str) -> str | None:
    """Why `unit` cannot be a metric's unit, or None when it can (the matrix's check and run.json's)."""
    if len(unit) > MAX_UNIT_CHARS:
        return f"a unit of {len(unit)} characters is more than {MAX_UNIT_CHARS}"
    bad = next((ch for ch in unit if not ch.isprintable()), None)
    if bad is not None:
        return f"a unit holds the control or invisible character U+{ord(bad):04X}"
    return None
