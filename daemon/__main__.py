"""``python -m ptxfactory.daemon``: the same CLI as the ``ptxfactory`` command."""
from ptxfactory.daemon.cli import main

raise SystemExit(main())
