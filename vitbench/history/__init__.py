"""A project's speed over its commits (docs/history.md): store.py keeps every measured run (SQLite, append-only),
collect.py reads a results directory into one, series.py makes the series per metric and trial (normalised where
the machine changed) and changes.py finds their change points. `vitbench history` (cli/history_cmd.py) is thin
over them. The package imports its modules lazily: nothing here loads numpy or ruptures."""
