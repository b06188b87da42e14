"""A project's speed over its commits (docs/history.md): store.py keeps every measured run (SQLite, append-only),
collect.py reads a results directory into one, series.py makes the series per metric and trial (normalised where
the machine changed) and changes.py finds their change points. `vitbench history` (cli/history_cmd.py) is thin
over them. The package imports its modules lazily: nothing here loads numpy, ruptures or sqlite3."""

HISTORY_ENV = "VITBENCH_HISTORY"  # the history file, where --db is not given
# else, relative to the current directory: beside the repository when run from its top (as CI does); from a
# subfolder it lies inside the checkout (docs/history.md)
DEFAULT_PATH = "../vitbench-history/history.sqlite"

