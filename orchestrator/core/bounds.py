"""Bounds on numbers a user gives both as matrix keys and as CLI options (--replicates, --retries,
--seed), in a module that imports nothing: the CLI's parser checks them without loading the
config models (pydantic, YAML) that `orch --help` never needs."""

MAX_REPLICATES = 100_000
MAX_RETRIES = 10
MAX_SEED = 2**64 - 1
