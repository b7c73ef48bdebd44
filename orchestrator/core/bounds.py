"""Bounds on numbers a user gives both as matrix keys and as CLI options (--replicates, --retries,
--seed), and on counts read back from files (sessions), in a module that imports nothing: the
CLI's parser checks them without loading the config models (pydantic, YAML) that `orch --help`
never needs, and the report's summary reader without depending on the config."""

MAX_REPLICATES = 100_000
MAX_RETRIES = 10
MAX_SEED = 2**64 - 1
MAX_SESSIONS = 10**9  # a proportion's n: what a validity rule may ask for, what a summary may hold
