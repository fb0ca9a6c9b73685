"""``python -m ptxfactory.daemon.lsp [--backend NAME] [--store PATH]``: the LSP server on stdio."""
from __future__ import annotations

import argparse

from .server import serve_stdio


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ptxfactory.daemon.lsp", description=__doc__)
    parser.add_argument("--backend", choices=("auto", "gpu", "simulated", "none"), default="auto",
                        help="evaluation backend; 'simulated' is for tests only and never verifies")
    parser.add_argument("--store", default=None, help="lesson store (SQLite); default $PTXFACTORY_HOME/lessons.sqlite")
    parser.add_argument("--stdio", action="store_true", help="accepted for editors that pass it; stdio is the only transport")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    serve_stdio(args.backend, args.store)


if __name__ == "__main__":
    main()
