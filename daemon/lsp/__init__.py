"""The language server (pygls): one session per editor connection over the daemon's engine.

:func:`ptxfactory.daemon.lsp.server.build_server` builds a session; ``serve_stdio`` (``ptxfactory serve
--stdio``, ``python -m ptxfactory.daemon.lsp``) runs one on stdin/stdout with an in-process engine.
"""
