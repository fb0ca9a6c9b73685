"""Compile, verify and time candidates. GPU work runs inside isolated worker processes (see :mod:`.pool`)."""
