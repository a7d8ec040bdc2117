"""`python -m fusegraph ...`: the same as the `fusegraph` command."""

from .driver.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
