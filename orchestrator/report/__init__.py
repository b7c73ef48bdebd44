"""The report: a model built from the journal, findings in words, charts, the rendered HTML,
the index of runs, comparisons and exports. Reads the store; never touches a host."""
