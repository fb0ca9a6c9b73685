"""Where the agents' providers come from: a TOML config file, then the environment.

The file is ``$PTXFACTORY_CONFIG``, else ``$XDG_CONFIG_HOME/ptxfactory/config.toml``, else
``~/.config/ptxfactory/config.toml``::

    [agents]
    provider = "local"          # which [agents.providers.NAME] the roles use (default: the first)
    concurrency = 2             # calls in flight at once
    budget_tokens = 200000      # per job, input + output
    budget_usd = 0.50           # per job, from the prices below
    ideas = 3                   # ideas the planner is asked for
    rounds = 2                  # planning rounds per job (the first, then after each new best)
    record = "~/agent-transcript.json"  # optional: write every reply to a transcript the replay provider reads

    [agents.providers.local]
    kind = "openai"             # "openai" (any OpenAI-compatible endpoint), "anthropic" or "replay"
    model = "Qwen/Qwen2.5-Coder-32B-Instruct"
    base_url = "http://127.0.0.1:8000/v1"
    api_key_env = "VLLM_API_KEY"   # the NAME of the variable holding the key, never the key itself
    usd_per_mtok_in = 0.0          # price per million input tokens
    usd_per_mtok_out = 0.0
    timeout_s = 120
    max_retries = 2
    max_output_tokens = 4096

The environment overrides the file (or configures a provider without one): ``PTXFACTORY_AGENT_KIND``,
``PTXFACTORY_AGENT_MODEL``, ``PTXFACTORY_AGENT_BASE_URL``, ``PTXFACTORY_AGENT_KEY_ENV``,
``PTXFACTORY_AGENT_BUDGET_TOKENS``, ``PTXFACTORY_AGENT_BUDGET_USD``, ``PTXFACTORY_AGENT_RECORD``,
``PTXFACTORY_AGENTS=off``.
A key in the file itself is refused: the config names the variable, the key stays in the environment.
"""
from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

KINDS = ("openai", "anthropic", "replay")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "replay": ""}


class ConfigError(ValueError):
    """The config file is malformed (the message names the file and key, never a key's value)."""


@dataclass(frozen=True)
class ProviderConfig:
    """One endpoint: the SDK that speaks to it (``kind``), the model, where, which variable holds its key, prices."""

    name: str
    kind: str
    model: str
    base_url: str | None = None
    api_key_env: str = ""
    usd_per_mtok_in: float = 0.0
    usd_per_mtok_out: float = 0.0
    timeout_s: float = 120.0
    max_retries: int = 2
    max_output_tokens: int = 4096
    transcript: str | None = None  # replay: the recorded transcript (JSON: request hash -> reply)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """USD for one call from its token counts and this provider's prices."""
        return (input_tokens * self.usd_per_mtok_in + output_tokens * self.usd_per_mtok_out) / 1e6

    def api_key(self) -> str | None:
        """The key, read from the named variable at the moment it is needed; never kept in this object."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


@dataclass(frozen=True)
class AgentConfig:
    """The agents' settings: the provider the roles use, concurrency, the per-job budget, the search's shape."""

    provider: ProviderConfig | None
    concurrency: int = 2
    budget_tokens: int | None = 200_000
    budget_usd: float | None = None
    ideas: int = 3
    rounds: int = 2
    record: str | None = None  # a transcript file every answered call is written to (providers.RecordingProvider)
    source: str = field(default="defaults", compare=False)  # where it came from, for messages

    @property
    def enabled(self) -> bool:
        return self.provider is not None


def config_path() -> Path:
    """``$PTXFACTORY_CONFIG``, else ``$XDG_CONFIG_HOME/ptxfactory/config.toml``, else ``~/.config/ptxfactory/config.toml``."""
    explicit = os.environ.get("PTXFACTORY_CONFIG")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ptxfactory" / "config.toml"


def _number(table: dict, key: str, kind, where: str, default=None):
    value = table.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{where}.{key}: expected a number")
    return kind(value)


def _path(table: dict, key: str, where: str) -> str | None:
    value = table.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{where}.{key}: expected a file path (a string)")
    return value


def _provider(name: str, table: dict, where: str) -> ProviderConfig:
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    for secret in ("api_key", "key", "token"):
        if secret in table:
            raise ConfigError(f"{where}.{secret}: keys do not go in the config file; name the variable "
                              f"that holds it with api_key_env")
    kind = table.get("kind", "openai")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    model = table.get("model", "replay" if kind == "replay" else None)
    if not isinstance(model, str) or not model:
        raise ConfigError(f"{where}.model: required (a string)")
    return ProviderConfig(
        name=name, kind=kind, model=model, base_url=table.get("base_url"),
        api_key_env=str(table.get("api_key_env", DEFAULT_KEY_ENV[kind])),
        usd_per_mtok_in=_number(table, "usd_per_mtok_in", float, where, 0.0),
        usd_per_mtok_out=_number(table, "usd_per_mtok_out", float, where, 0.0),
        timeout_s=_number(table, "timeout_s", float, where, 120.0),
        max_retries=_number(table, "max_retries", int, where, 2),
        max_output_tokens=_number(table, "max_output_tokens", int, where, 4096),
        transcript=_path(table, "transcript", where),
    )


def parse_config(data: dict, where: str = "config") -> AgentConfig:
    """An :class:`AgentConfig` from the parsed TOML (its ``[agents]`` table). Raises ConfigError."""
    agents = data.get("agents", {})
    if not isinstance(agents, dict):
        raise ConfigError(f"{where}: [agents] must be a table")
    tables = agents.get("providers", {})
    providers = {name: _provider(name, t, f"{where}: agents.providers.{name}") for name, t in tables.items()}
    chosen = agents.get("provider")
    if chosen is not None and chosen not in providers:
        raise ConfigError(f"{where}: agents.provider: no [agents.providers.{chosen}] table")
    provider = providers[chosen] if chosen else next(iter(providers.values()), None)
    w = f"{where}: agents"
    return AgentConfig(
        provider=provider,
        concurrency=max(1, _number(agents, "concurrency", int, w, 2)),
        budget_tokens=_number(agents, "budget_tokens", int, w, 200_000),
        budget_usd=_number(agents, "budget_usd", float, w, None),
        ideas=max(1, _number(agents, "ideas", int, w, 3)),
        rounds=max(1, _number(agents, "rounds", int, w, 2)),
        record=_path(agents, "record", w),
        source=where,
    )


def _from_env(config: AgentConfig, env) -> AgentConfig:
    if env.get("PTXFACTORY_AGENTS", "").lower() in ("off", "0", "false", "no"):
        return replace(config, provider=None, source="PTXFACTORY_AGENTS=off")
    kind = env.get("PTXFACTORY_AGENT_KIND")
    model = env.get("PTXFACTORY_AGENT_MODEL")
    provider = config.provider
    if kind or model:
        kind = kind or (provider.kind if provider else "openai")
        if kind not in KINDS:
            raise ConfigError(f"PTXFACTORY_AGENT_KIND: {kind!r} is not one of {', '.join(KINDS)}")
        base = provider if provider is not None and provider.kind == kind else ProviderConfig(
            name="env", kind=kind, model="", api_key_env=DEFAULT_KEY_ENV[kind])
        provider = replace(base, model=model or base.model)
        if not provider.model:
            raise ConfigError("PTXFACTORY_AGENT_MODEL: required with PTXFACTORY_AGENT_KIND")
    if provider is not None:
        if env.get("PTXFACTORY_AGENT_BASE_URL"):
            provider = replace(provider, base_url=env["PTXFACTORY_AGENT_BASE_URL"])
        if env.get("PTXFACTORY_AGENT_KEY_ENV"):
            provider = replace(provider, api_key_env=env["PTXFACTORY_AGENT_KEY_ENV"])
    tokens, usd = config.budget_tokens, config.budget_usd
    try:
        if env.get("PTXFACTORY_AGENT_BUDGET_TOKENS"):
            tokens = int(env["PTXFACTORY_AGENT_BUDGET_TOKENS"])
        if env.get("PTXFACTORY_AGENT_BUDGET_USD"):
            usd = float(env["PTXFACTORY_AGENT_BUDGET_USD"])
    except ValueError as exc:
        raise ConfigError(f"agent budget in the environment: {exc}") from None
    record = env.get("PTXFACTORY_AGENT_RECORD") or config.record
    return replace(config, provider=provider, budget_tokens=tokens, budget_usd=usd, record=record)


def load_config(path: Path | None = None, env=None) -> AgentConfig:
    """The agents' config: the file (:func:`config_path`; missing is fine: no provider), then the environment.

    Raises ConfigError for a malformed file or variable.
    """
    env = os.environ if env is None else env
    path = path or config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        config = AgentConfig(provider=None, source=str(path))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        config = parse_config(data, str(path))
    return _from_env(config, env)
