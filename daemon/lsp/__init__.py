"""The LSP server (pygls): code lens, the optimise/cancel commands with progress, code actions.

Start it with :func:`ptxfactory.daemon.lsp.server.serve_stdio` or ``python -m ptxfactory.daemon.lsp``.
"""
