"""`python -m bench`: see bench/README.md."""

from bench.cli import main

raise SystemExit(main())
