"""The only layer that sequences effects: the sweep API (run, resume, restore), the trial loop
and its phases, host backup and restore, step sources (fixed and adaptive) and signals. It
receives the edges as arguments, so tests swap in fakes."""
