"""The pure core: matrices and inventories parsed into frozen models, cells, plans, env-file
edits as text transforms, statistics, sequential tests, redaction and the journal's record
shapes. Nothing here does I/O beyond reading the YAML it is given; nothing here imports from
outside `orchestrator.core` (and `orchestrator.errors`)."""
