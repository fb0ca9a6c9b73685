"""Language-model providers behind one call: ``await provider.complete(request) -> Reply``.

``openai``: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, Ollama, LiteLLM)
through the official ``openai`` SDK; ``anthropic``: the Messages API through the official
``anthropic`` SDK; ``replay``: recorded transcripts (request hash -> reply), for tests and demos;
:class:`RecordingProvider` wraps any of them and writes such a transcript as the job goes.
The SDKs retry 408/409/429/5xx and connection errors with exponential backoff (honouring
``retry-after``/``retry-after-ms``) up to ``max_retries`` times, each attempt bounded by ``timeout_s``;
what still fails raises :class:`ProviderError`, whose message never holds the key.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .config import ProviderConfig
from .redact import install_log_filter, redact, remember

log = logging.getLogger(__name__)


class ProviderError(RuntimeError):
    """A call that failed after the SDK's retries (timeout, HTTP status, connection), keys redacted."""


@dataclass(frozen=True)
class Request:
    """One call: the role asking, a system prompt, the user's message, and the most output tokens wanted."""

    role: str
    system: str
    user: str
    max_tokens: int

    def digest(self) -> str:
        """The hash a replay transcript is keyed by (role, system, user; not ``max_tokens``, which the budget moves)."""
        blob = json.dumps({"role": self.role, "system": self.system, "user": self.user}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Reply:
    """A model's answer and what it cost in tokens (as the endpoint reported them) and seconds."""

    text: str
    input_tokens: int
    output_tokens: int
    latency_s: float


class Provider(Protocol):
    config: ProviderConfig

    async def complete(self, request: Request) -> Reply: ...

    async def close(self) -> None: ...


def _error(config: ProviderConfig, exc: BaseException) -> ProviderError:
    status = getattr(exc, "status_code", None)
    what = f"HTTP {status}" if status else type(exc).__name__
    return ProviderError(redact(f"{config.name} ({config.kind}, {config.model}): {what}: {exc}")[:500])


class OpenAIProvider:
    """An OpenAI-compatible chat-completions endpoint through ``openai.AsyncOpenAI``."""

    def __init__(self, config: ProviderConfig):
        import openai

        self.config, self._openai = config, openai
        key = config.api_key()
        remember(key)
        # a local server (vLLM, Ollama) may want no key; the SDK insists on one, so a placeholder is sent
        self._client = openai.AsyncOpenAI(api_key=key or "unused", base_url=config.base_url,
                                          timeout=config.timeout_s, max_retries=config.max_retries)

    async def complete(self, request: Request) -> Reply:
        t0 = time.monotonic()
        try:
            resp = await self._client.chat.completions.create(
                model=self.config.model, max_tokens=request.max_tokens,
                messages=[{"role": "system", "content": request.system}, {"role": "user", "content": request.user}])
        except self._openai.OpenAIError as exc:
            raise _error(self.config, exc) from None
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        usage = resp.usage
        return Reply(text=text, input_tokens=usage.prompt_tokens if usage else 0,
                     output_tokens=usage.completion_tokens if usage else 0, latency_s=time.monotonic() - t0)

    async def close(self) -> None:
        await self._client.close()


class AnthropicProvider:
    """Anthropic's Messages API through ``anthropic.AsyncAnthropic``."""

    def __init__(self, config: ProviderConfig):
        import anthropic

        self.config, self._anthropic = config, anthropic
        key = config.api_key()
        remember(key)
        self._client = anthropic.AsyncAnthropic(api_key=key or "unused", base_url=config.base_url,
                                                timeout=config.timeout_s, max_retries=config.max_retries)

    async def complete(self, request: Request) -> Reply:
        t0 = time.monotonic()
        try:
            resp = await self._client.messages.create(
                model=self.config.model, max_tokens=request.max_tokens, system=request.system,
                messages=[{"role": "user", "content": request.user}])
        except self._anthropic.AnthropicError as exc:
            raise _error(self.config, exc) from None
        text = "".join(getattr(block, "text", "") for block in resp.content)
        return Reply(text=text, input_tokens=resp.usage.input_tokens, output_tokens=resp.usage.output_tokens,
                     latency_s=time.monotonic() - t0)

    async def close(self) -> None:
        await self._client.close()


class ReplayProvider:
    """Serves a recorded transcript: a JSON object ``{"replies": {request hash: reply}}`` where a reply is a
    string or ``{"text": ..., "input_tokens": n, "output_tokens": n}`` (tokens default to the texts' length
    over 4). A request not in the transcript raises ProviderError naming its hash and role, so a demo's
    transcript can be completed from the error."""

    def __init__(self, config: ProviderConfig, replies: dict | None = None):
        self.config = config
        if replies is None:
            if not config.transcript:
                raise ProviderError(f"{config.name} (replay): no transcript file configured")
            try:
                replies = json.loads(Path(config.transcript).expanduser().read_text())["replies"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise ProviderError(f"{config.name} (replay): cannot read {config.transcript}: {exc}") from None
        self.replies = dict(replies)
        self.missed: list[tuple[str, str]] = []  # (hash, role) asked for and not recorded

    async def complete(self, request: Request) -> Reply:
        digest = request.digest()
        reply = self.replies.get(digest)
        if reply is None:
            self.missed.append((digest, request.role))
            raise ProviderError(f"{self.config.name} (replay): no recorded reply for {request.role} request {digest}")
        if isinstance(reply, str):
            reply = {"text": reply}
        text = reply.get("text", "")
        return Reply(text=text, input_tokens=int(reply.get("input_tokens", (len(request.system) + len(request.user)) // 4)),
                     output_tokens=int(reply.get("output_tokens", len(text) // 4)), latency_s=0.0)

    async def close(self) -> None:
        return None


class RecordingProvider:
    """Wraps a provider and records each answered request in a transcript that :class:`ReplayProvider` reads
    (``{"replies": {request hash: {"text", "input_tokens", "output_tokens"}}}``), so a job can be re-run without
    paying twice. The file is rewritten (atomically, mode 0600) after every answer, so a cancelled or crashed job
    keeps what it paid for; an existing transcript at the path is added to, not replaced. It holds the replies and
    their token counts only: no key, no header, no prompt (texts pass through :func:`redact` first). A failed call
    records nothing."""

    def __init__(self, inner: Provider, path: str | Path):
        self.inner, self.config = inner, inner.config
        self.path = Path(path).expanduser()
        self.replies: dict[str, dict] = {}
        try:
            old = json.loads(self.path.read_text()).get("replies", {})
            if isinstance(old, dict):
                self.replies.update(old)
        except (OSError, ValueError, AttributeError):
            pass  # no transcript yet (or not one): start afresh

    async def complete(self, request: Request) -> Reply:
        reply = await self.inner.complete(request)
        self.replies[request.digest()] = {"role": request.role, "text": redact(reply.text),
                                          "input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
        try:
            self._write()
        except OSError as exc:  # the call succeeded; losing the record must not lose the reply
            log.warning("%s: cannot write the transcript %s: %s", self.config.name, self.path, exc.strerror)
        return reply

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"recorded_from": {"provider": self.config.name, "kind": self.config.kind, "model": self.config.model},
                "replies": self.replies}
        fd, tmp = tempfile.mkstemp(prefix=".transcript-", dir=self.path.parent)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def close(self) -> None:
        await self.inner.close()


def make_provider(config: ProviderConfig) -> Provider:
    """The provider for ``config.kind``. Raises ProviderError when its SDK is not installed."""
    install_log_filter()
    if config.kind == "replay":
        return ReplayProvider(config)
    try:
        return OpenAIProvider(config) if config.kind == "openai" else AnthropicProvider(config)
    except ImportError as exc:
        raise ProviderError(f"{config.name}: the {config.kind!r} SDK is not installed ({exc.name}); "
                            f"pip install 'ptxfactory[agents]'") from None
