"""`python -m hxb_dump` is the `hxb-dump` command."""

from hxb_dump.cli import main

raise SystemExit(main())
