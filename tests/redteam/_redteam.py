"""The red-team suite's loader: every ``*.cu`` here is a variant of the rmsnorm example with a header saying what it
exploits and how the verifier must answer it.

Header lines (``//`` comments at the top of the file):

``// exploits: ...``  what it exploits (continuation lines start with ``//   ``); required.
``// expect: A|B``    the answers that count as right: a ``Rejected.check`` (``correctness``, ``input_mutated``,
                      ``out_of_bounds``, ``race``, ``post_timing``, ``impossible_time``, ``launch``, ``load``),
                      a static finding (``static_source``, ``static_launch``, ``static_resources``) or an outcome
                      (``measured``, ``crashed``, ``timed_out``, ``compile_failed``); required.
``// launch: grid=E block=E [smem=E]``  a 1-D launch (expressions as in specs, no spaces inside one); else the spec's.
``// reason: REGEX``  searched (``re.search``) in the rejection's reason; optional.
``// gap: CHECK``     a static check that *should* also refuse the file but does not yet: the run-time answer in
                      ``expect`` still holds (the CPU test asserts the gap, xfail strict); optional.
``// known-gap: WHY``  the verifier does NOT give ``expect`` yet (a known hole, said why): the GPU test is xfail
                      strict, so fixing the hole turns it into a failure that asks for this line to go; optional.
``// check: K=V ...``  the example's ``[check]`` with these keys changed for this file (``deterministic=false``);
                      optional.
``// arch: SM``        compile for this arch instead of the spec's (a cubin for another GPU); optional.

Also the honest candidates every verifier change must keep measuring: the original example and the first
RMS instance of the "rowwise" family (and its LayerNorm instance, which must fail on correctness).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ptxfactory.harness.source import find_kernel
from ptxfactory.protocol import Candidate, KernelSpec, LaunchConfig, load_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXAMPLE = ROOT / "examples" / "rmsnorm" / "rmsnorm.cu"
SPEC: KernelSpec = load_spec(EXAMPLE.with_name(EXAMPLE.name + ".toml")).kernels["rmsnorm"]

STATIC_CHECKS = ("static_source", "static_binary", "static_launch", "static_resources")
RUNTIME_CHECKS = ("correctness", "input_mutated", "out_of_bounds", "race", "post_timing", "impossible_time", "launch", "load",
                  "misaligned_view")
OUTCOMES = ("measured", "crashed", "timed_out", "compile_failed")
KNOWN = STATIC_CHECKS + RUNTIME_CHECKS + OUTCOMES

_HEADER = re.compile(r"^//\s*(exploits|expect|launch|reason|gap|known-gap|check|arch):\s*(.*?)\s*$")
_CONT = re.compile(r"^//\s{2,}(\S.*?)\s*$")


class HeaderError(ValueError):
    """A red-team file whose header is missing a field or names an unknown expectation."""


@dataclass(frozen=True)
class Case:
    """One red-team file: its candidate and what the verifier must say about it."""

    name: str
    path: Path
    exploits: str
    expect: tuple[str, ...]
    candidate: Candidate
    reason: str | None = None
    gap: str | None = None
    known_gap: str | None = None
    fields: dict = field(default_factory=dict)
    spec: KernelSpec = SPEC  # the example's spec, with the file's ``check:`` changes
    arch: str = SPEC.arch  # what the file is compiled for

    @property
    def static(self) -> bool:
        """Expected to be refused by the static checks (and so never to reach the GPU)."""
        return all(e in STATIC_CHECKS for e in self.expect)

    def answer(self, result) -> str:
        """The result's check (for a rejection) or outcome, comparable with :attr:`expect`."""
        return result.check if getattr(result, "outcome", None) == "rejected" else result.outcome


def parse_header(text: str) -> dict[str, str]:
    """The header fields of a red-team file (exploits/expect/launch/reason/gap/known-gap), continuations joined."""
    fields: dict[str, str] = {}
    last = None
    for line in text.splitlines():
        if not line.startswith("//"):
            break
        m = _HEADER.match(line)
        if m:
            last = m.group(1)
            if last in fields:
                raise HeaderError(f"{last!r} given twice")
            fields[last] = m.group(2)
            continue
        c = _CONT.match(line)
        if c and last in ("exploits", "known-gap"):
            fields[last] += " " + c.group(1)
    return fields


def parse_launch(text: str, spec: KernelSpec = SPEC) -> LaunchConfig:
    """``grid=E block=E [smem=E]`` as a 1-D :class:`LaunchConfig` (missing keys from the spec's launch)."""
    pairs = [p.split("=", 1) for p in text.split()]
    parts = {p[0]: p[1] for p in pairs if len(p) == 2}
    unknown = set(parts) - {"grid", "block", "smem"}
    if unknown or len(parts) != len(pairs) or not all(parts.values()):
        raise HeaderError(f"launch {text!r}: use grid=EXPR block=EXPR [smem=EXPR], no spaces inside an expression")

    def value(v: str) -> str | int:
        return int(v) if v.isdigit() else v

    return LaunchConfig(
        grid=[value(parts["grid"])] if "grid" in parts else list(spec.launch.grid),
        block=[value(parts["block"])] if "block" in parts else list(spec.launch.block),
        shared_mem=value(parts["smem"]) if "smem" in parts else spec.launch.shared_mem,
    )


def load_case(path: Path, spec: KernelSpec = SPEC) -> Case:
    """Parse one file into a :class:`Case` (candidate generator ``"redteam"``). Raises :class:`HeaderError`."""
    source = path.read_text()
    fields = parse_header(source)
    for required in ("exploits", "expect"):
        if not fields.get(required):
            raise HeaderError(f"{path.name}: header has no '// {required}:' line")
    expect = tuple(e.strip() for e in fields["expect"].split("|"))
    bad = [e for e in expect if e not in KNOWN]
    if bad:
        raise HeaderError(f"{path.name}: unknown expectation(s) {bad} (known: {', '.join(KNOWN)})")
    if any(e in STATIC_CHECKS for e in expect) and not all(e in STATIC_CHECKS for e in expect):
        raise HeaderError(f"{path.name}: do not mix static and run-time expectations")
    gap = fields.get("gap") or None
    if gap is not None and gap not in STATIC_CHECKS:
        raise HeaderError(f"{path.name}: gap {gap!r} is not a static check")
    launch = parse_launch(fields["launch"], spec) if fields.get("launch") else parse_launch("", spec)
    case_spec = spec_with(spec, fields["check"]) if fields.get("check") else spec
    arch = fields.get("arch") or spec.arch
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise HeaderError(f"{path.name}: arch {arch!r} is not sm_NN")
    kdef = find_kernel(source, spec.name)
    cand = Candidate(
        kernel_name=spec.name, source=source, kernel_text=kdef.text, launch=launch, generator="redteam",
        description=f"redteam {path.stem}: {fields['exploits'][:80]}",
    )
    return Case(name=path.stem, path=path, exploits=fields["exploits"], expect=expect, candidate=cand,
                reason=fields.get("reason") or None, gap=gap, known_gap=fields.get("known-gap") or None, fields=fields,
                spec=case_spec, arch=arch)


def spec_with(spec: KernelSpec, text: str) -> KernelSpec:
    """``spec`` with ``K=V`` pairs (``true``/``false``, numbers) changed in its ``[check]``. Raises :class:`HeaderError`."""
    update = {}
    for pair in text.split():
        key, _, value = pair.partition("=")
        if key not in type(spec.check).model_fields or not value:
            raise HeaderError(f"check {pair!r}: use KEY=VALUE with a key of [check]")
        update[key] = {"true": True, "false": False}.get(value.lower(), value)
    try:
        check = type(spec.check).model_validate({**spec.check.model_dump(), **update})
    except ValueError as exc:
        raise HeaderError(f"check {text!r}: {exc}") from None
    return spec.model_copy(update={"check": check})


def cases(spec: KernelSpec = SPEC) -> list[Case]:
    """Every red-team file in this folder, by name."""
    return [load_case(p, spec) for p in sorted(HERE.glob("*.cu"))]


# ---------------------------------------------------------------- honest candidates


def original() -> Candidate:
    """The example kernel itself, as the strategy builds it."""
    from ptxfactory.search.strategy import original_candidate

    return original_candidate(SPEC, EXAMPLE.read_text())


def family(norm: str = "rms") -> list[Candidate]:
    """The "rowwise" family's instances for the example with the given ``norm`` ("rms" or "layer"), best first."""
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators.rowwise import RowwiseNormFamily

    source = EXAMPLE.read_text()
    ctx = GenContext(spec=SPEC, source=source, kernel=find_kernel(source, SPEC.name), original=original())
    return [c for c in RowwiseNormFamily().propose(ctx) if c.params.get("norm") == norm]


def family_best() -> Candidate:
    """The family's first (best by its H200 sweep) RMS instance."""
    return family("rms")[0]
