"""``python -m memoryd``: the command line (see :mod:`memoryd.cli`)."""

from memoryd.cli import main

raise SystemExit(main())
