"""Agents that write kernels: language-model roles (planner, coder, reviewer) as the ``agent`` generator.

``config``: providers and budgets from the user's config file and the environment; ``providers``: the
OpenAI-compatible, Anthropic and replay providers; ``budget``: tokens and money per job; ``prompts`` (and
the ``prompts/`` templates): what each role is asked; ``evidence``: what the planner is shown; ``parse``:
reading replies; ``arm``: the interface through which the search feeds results back; ``generator``: the
``agent`` generator; ``redact``: keys out of every text; ``loopback``: a scripted OpenAI/Anthropic server
on loopback for tests and demos.
"""
