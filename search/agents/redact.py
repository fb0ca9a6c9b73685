"""Keys out of every text the agents produce: errors, log lines, stored rows, reports, editor messages.

Each provider registers the key it read (:func:`remember`); :func:`redact` replaces any registered key
(and anything shaped like a bearer token) with ``[redacted]``. :func:`install_log_filter` puts the
same scrubbing on the handlers of the loggers the SDKs write to.
"""
from __future__ import annotations

import logging
import re
import threading

_lock = threading.Lock()
_secrets: set[str] = set()
_BEARER = re.compile(r"(?i)(bearer\s+|x-api-key[\"']?\s*[:=]\s*[\"']?|api[_-]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9._\-]{8,}")
MARK = "[redacted]"


def remember(secret: str | None) -> None:
    """Register a key so that :func:`redact` removes it wherever it turns up (keys under 6 characters are not
    registered: replacing them would mangle ordinary words)."""
    if secret and len(secret) >= 6:
        with _lock:
            _secrets.add(secret)


def redact(text: object) -> str:
    """``text`` as a string with every registered key and bearer-shaped token replaced by ``[redacted]``."""
    out = str(text)
    with _lock:
        secrets = sorted(_secrets, key=len, reverse=True)
    for secret in secrets:
        if secret in out:
            out = out.replace(secret, MARK)
    return _BEARER.sub(lambda m: m.group(1) + MARK, out)


class RedactingFilter(logging.Filter):
    """A logging filter that renders each record's message and redacts it (arguments folded in)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is left to logging's own error path
            return True
        clean = redact(message)
        if clean != message or record.args:
            record.msg, record.args = clean, None
        return True


SDK_LOGGERS = ("openai", "anthropic", "httpx", "httpx2", "httpcore", "httpcore2", "ptxfactory")
_installed = False


def install_log_filter() -> None:
    """Put a :class:`RedactingFilter` on the SDK loggers (records they log themselves) and on the root
    handlers (records propagated from their children), once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    flt = RedactingFilter()
    for name in SDK_LOGGERS:
        logging.getLogger(name).addFilter(flt)
    for handler in logging.getLogger().handlers:
        handler.addFilter(flt)
