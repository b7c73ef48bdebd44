"""What a run leaves on disk: the run directory and its file names, the crash-safe journal and
the manifest (run.json, plan.json). Uses the core only."""
