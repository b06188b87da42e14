"""`python -m vitbench ...`: the `vitbench` command, for an interpreter whose scripts are not on PATH."""

from vitbench.entry import main

main()
