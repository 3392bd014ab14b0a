"""`python -m loopcheck` runs the command line."""

from loopcheck.cli import main

main()
