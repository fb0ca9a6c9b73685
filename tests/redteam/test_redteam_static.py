"""Red-team suite, CPU tier: what needs no GPU.

Every red-team file parses, compiles with NVRTC for sm_90a and keeps the example's signature; every ``static_*``
expectation is produced by :func:`static_check` and no other file (nor any honest candidate: the original, every
"rowwise" instance, every "tune" variant) is refused by it; the strategy never sends a statically refused file to
the backend; held-out sizes and seeds have the properties the verifier relies on; the bytes-moved floor's input.
The GPU tier (test_redteam_gpu.py) runs the rest on the H200.
"""
from __future__ import annotations

import asyncio
import re

import pytest

from ptxfactory.harness.compile import Compiled, compile_candidate
from ptxfactory.harness.plan import heldout_sizes, make_plan
from ptxfactory.harness.source import check_signature, find_kernel
from ptxfactory.harness.static_checks import static_check
from ptxfactory.protocol import GpuFacts, Measured, Rejected, evaluate

import _redteam as R

CASES = R.cases()
IDS = [c.name for c in CASES]
SPEC = R.SPEC


@pytest.fixture(scope="module")
def compiled() -> dict[str, Compiled]:
    return {c.name: compile_candidate(c.candidate, c.arch) for c in CASES}


# ---------------------------------------------------------------- the suite itself


def test_suite_covers_the_threat_list():
    names = set(IDS)
    assert len(CASES) >= 14
    required = {  # issue: the cheats and fragile kernels the suite must hold at least
        "some_rows", "hardcoded_n", "device_flag", "flag_past_output", "writes_nothing", "missing_sync", "vec_tail",
        "input_mutation", "bf16_accum", "missing_eps", "nan_constant_row", "oob_write", "grid_limit",
        "printf_debug", "clock_budget", "honest_warp_rows",
    }
    assert required <= names, required - names
    expects = {e for c in CASES for e in c.expect}
    # impossible_time has no file: with outputs poisoned before every timed launch, no kernel here can look faster
    # than it is; tests/gpu/test_harness.py::test_a_time_under_the_floor_is_rejected_unless_the_original_beats_it
    # proves the floor is wired.
    for check in ("correctness", "input_mutated", "out_of_bounds", "race", "post_timing",
                  "static_source", "static_launch", "static_resources", "measured"):
        assert check in expects, f"no red-team file expects {check!r}"
    assert sum(c.expect == ("measured",) for c in CASES) >= 1  # an honest file, besides the original and the family


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_header(case: R.Case):
    assert len(case.exploits) > 20, "say what it exploits"
    assert case.candidate.generator == "redteam" and case.candidate.kernel_name == "rmsnorm"
    if case.reason:
        re.compile(case.reason)
    for size in SPEC.check.sizes + SPEC.bench.sizes:  # the launch is an expression the harness can evaluate
        for e in case.candidate.launch.grid + case.candidate.launch.block + [case.candidate.launch.shared_mem]:
            assert int(evaluate(e, size)) >= 0


def test_header_parser_refuses_bad_files(tmp_path):
    body = (R.HERE / "some_rows.cu").read_text().split("\n", 4)[4]
    bad = {
        "no_expect.cu": "// exploits: something sneaky enough\n" + body,
        "unknown.cu": "// exploits: something sneaky enough\n// expect: wrongness\n" + body,
        "mixed.cu": "// exploits: something sneaky enough\n// expect: static_source|correctness\n" + body,
        "launch.cu": "// exploits: something sneaky enough\n// expect: correctness\n// launch: grid = M\n" + body,
    }
    for name, text in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(R.HeaderError):
            R.load_case(tmp_path / name)
    good = tmp_path / "good.cu"
    good.write_text("// exploits: two lines\n//   of text\n// expect: out_of_bounds|crashed\n"
                    "// launch: grid=cdiv(M,4) block=128 smem=64\n// known-gap: not yet\n//   caught\n" + body)
    case = R.load_case(good)
    assert case.exploits == "two lines of text" and case.expect == ("out_of_bounds", "crashed") and not case.static
    assert case.known_gap == "not yet caught" and case.gap is None
    assert case.candidate.launch.grid == ["cdiv(M,4)"] and case.candidate.launch.block == [128]
    assert case.candidate.launch.shared_mem == 64


def test_check_and_arch_headers(tmp_path):
    by_name = {c.name: c for c in CASES}
    assert by_name["atomic_sum_nondet"].spec.check.deterministic is False and by_name["atomic_sum"].spec is SPEC
    assert by_name["atomic_sum_nondet"].spec.check.sizes == SPEC.check.sizes  # the same plan fits
    assert by_name["other_arch"].arch == "sm_80" and by_name["some_rows"].arch == SPEC.arch
    body = (R.HERE / "some_rows.cu").read_text().split("\n", 4)[4]
    for header in ("// check: wobbly=1", "// check: deterministic", "// check: seeds=zero", "// arch: ampere"):
        (tmp_path / "bad.cu").write_text(f"// exploits: something sneaky enough\n// expect: correctness\n{header}\n" + body)
        with pytest.raises(R.HeaderError):
            R.load_case(tmp_path / "bad.cu")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_compiles_with_the_examples_signature(case: R.Case, compiled):
    result = compiled[case.name]
    assert isinstance(result, Compiled), getattr(result, "log", "")
    assert result.resources is not None and result.resources.registers > 0
    check_signature(SPEC, find_kernel(case.candidate.source, SPEC.name))


# ---------------------------------------------------------------- static checks: right refusals, no false positives


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_static_check_refuses_exactly_the_static_files(case: R.Case, compiled):
    finding = static_check(case.candidate, SPEC, compiled[case.name].resources, compiled[case.name].cubin)
    if case.static:
        assert finding is not None, f"{case.name}: static_check let it through"
        assert finding.check in case.expect, finding
        assert finding.reason
        if case.reason:
            assert re.search(case.reason, finding.reason), finding.reason
    else:
        assert finding is None, f"false positive on {case.name}: {finding}"


GAPS = [c for c in CASES if c.gap]


@pytest.mark.parametrize("case", GAPS, ids=[c.name for c in GAPS])
@pytest.mark.xfail(strict=True, reason="known verifier gap (see the file's '// gap:' line); XPASS means it was "
                                       "fixed: drop the gap line and make the static check the expectation")
def test_known_static_gaps(case: R.Case, compiled):
    finding = static_check(case.candidate, SPEC, compiled[case.name].resources, compiled[case.name].cubin)
    assert finding is not None and finding.check == case.gap


def test_no_false_positives_on_honest_candidates():
    """The original, every "rowwise" instance (RMS and LayerNorm) and every "tune" variant of the original and of
    the best instance compile and pass every static check."""
    from ptxfactory.search.base import GenContext
    from ptxfactory.search.generators.tune import TuneGenerator

    source = R.EXAMPLE.read_text()
    honest = [R.original()] + R.family("rms") + R.family("layer")
    for parent in (R.original(), R.family_best()):
        ctx = GenContext(spec=SPEC, source=parent.source, kernel=find_kernel(parent.source, SPEC.name), original=parent)
        honest += TuneGenerator().propose(ctx)
    assert len(honest) >= 1 + 22 + 2 + 4 + 3  # tune on the original: 3 options, block 128 (partial[256] allows no more)
    for cand in honest:
        comp = compile_candidate(cand, SPEC.arch, SPEC.check.fast_math)
        assert isinstance(comp, Compiled), (cand.description, getattr(comp, "log", ""))
        finding = static_check(cand, SPEC, comp.resources, comp.cubin)
        assert finding is None, f"false positive on {cand.description}: {finding}"
    assert source == R.EXAMPLE.read_text()


class _RecordingBackend:
    """Records what reaches the "GPU"; answers every evaluation with a correctness rejection."""

    def __init__(self):
        self.seen: list[str] = []

    async def facts(self) -> GpuFacts:
        return GpuFacts(name="fake", arch="sm_90a", sm_count=132, l2_bytes=50 << 20, copy_gbps=4000.0, peak_gbps=4800.0)

    async def evaluate(self, spec, baseline, candidate, plan):
        self.seen.append(candidate.candidate.key)
        if candidate.candidate.key == baseline.candidate.key:
            return Measured(candidate_key=candidate.candidate.key, timings=[], speedup=1.0, verified_sizes=[])
        return Rejected(candidate_key=candidate.candidate.key, check="correctness", reason="fake")

    async def close(self) -> None:
        pass


def test_strategy_never_sends_a_statically_refused_file_to_the_gpu(example_copy, monkeypatch):
    import ptxfactory.search.strategy as strategy

    class RedTeam:
        name = "redteam"

        def propose(self, ctx):
            return [c.candidate for c in CASES]

    monkeypatch.setattr(strategy, "load_generator", lambda name: RedTeam())
    backend = _RecordingBackend()
    summary = asyncio.run(strategy.optimise(example_copy, "rmsnorm", backend=backend, generators=("redteam",), patience=None))
    by_key = {r.candidate.key: r for r in summary.rows}
    dropped = [case for case in CASES if case.candidate.key not in by_key]
    # a case that compiles to the same machine code as an earlier one is dropped, never evaluated
    assert len(dropped) == summary.duplicates, [c.name for c in dropped]
    for case in CASES:
        row = by_key.get(case.candidate.key)
        if row is None:
            assert case.candidate.key not in backend.seen, case.name
            continue
        if case.static:
            assert case.candidate.key not in backend.seen, case.name
            assert isinstance(row.result, Rejected) and row.result.check in case.expect, (case.name, row.result)
        else:
            assert case.candidate.key in backend.seen, case.name


# ---------------------------------------------------------------- held-out sizes, seeds


SECRETS = range(40)


def test_heldout_sizes_are_unseen_odd_and_include_a_single_row_and_a_long_row():
    seen = [dict(s) for s in SPEC.check.sizes + SPEC.bench.sizes]
    largest_n = max(s["N"] for s in seen)  # the original is the oracle: held-out sizes stay inside the listed envelope
    fewest_m = min(s["M"] for s in seen)
    for secret in SECRETS:
        sizes = heldout_sizes(SPEC, secret)
        assert len(sizes) >= 3
        for size in sizes:
            assert size not in seen, (secret, size)
            assert all(v % 2 == 1 and v >= 1 for v in size.values()), (secret, size)  # odd: never a vector multiple
            assert size["M"] * size["N"] <= SPEC.check.max_heldout_elements
        assert all(fewest_m <= s["M"] and s["N"] <= largest_n for s in sizes), (secret, sizes)
        assert any(s["M"] == fewest_m for s in sizes), (secret, sizes)  # the fewest rows listed
        assert any(s["N"] >= largest_n - 1 for s in sizes), (secret, sizes)  # the long row (bf16 accumulation)


def test_heldout_sizes_are_deterministic_per_secret_and_differ_across_secrets():
    assert heldout_sizes(SPEC, 12345) == heldout_sizes(SPEC, 12345)
    distinct = {tuple(tuple(sorted(s.items())) for s in heldout_sizes(SPEC, secret)) for secret in SECRETS}
    assert len(distinct) >= len(SECRETS) // 2


def test_plan_seeds_cover_every_stress_variant_and_are_secret():
    from ptxfactory.harness.buffers import VARIANTS

    names = " ".join(v[0] for v in VARIANTS)
    assert "special rows" in names and "x64" in names  # the zero/constant rows and the large magnitude
    plan = make_plan(SPEC, secret=7)
    assert len(plan.seeds) >= max(SPEC.check.seeds, len(VARIANTS))
    assert len(set(plan.seeds)) == len(plan.seeds)
    assert plan == make_plan(SPEC, secret=7)
    assert make_plan(SPEC, secret=8).seeds != plan.seeds
    assert make_plan(SPEC).seeds != make_plan(SPEC).seeds  # no secret: a fresh one each job
    assert plan.verify_sizes == list(SPEC.check.sizes) and plan.bench_sizes == list(SPEC.bench.sizes)
    assert plan.heldout_sizes == heldout_sizes(SPEC, 7)
    assert (plan.rtol, plan.atol) == (SPEC.check.rtol, SPEC.check.atol)


# ---------------------------------------------------------------- the floor


def test_bytes_moved_is_the_floors_numerator():
    """The impossible-time floor is ``bytes_moved / (peak_gbps * 1e3)`` µs (inline in gpu_eval.Evaluator.evaluate;
    no pure function to test, so its input is tested here)."""
    size = {"M": 32768, "N": 4096}
    m, n = size["M"], size["N"]
    assert SPEC.bytes_moved_at(size) == 2 * m * n * 2 + 2 * n  # x read once, y written once (bf16), w read once
    for s in SPEC.bench.sizes:
        assert SPEC.bytes_moved_at(s) == 4 * s["M"] * s["N"] + 2 * s["N"]
    data = SPEC.model_dump(mode="json")
    data["args"] = [{**a, "role": "inout"} if a["name"] == "y" else a for a in data["args"]]
    inout = type(SPEC).model_validate(data)
    assert inout.bytes_moved_at(size) == 3 * m * n * 2 + 2 * n  # an inout buffer is read and written
    # at the H200's ~4.8 TB/s the floor of the middle bench size is ~112 µs: a time under it cannot be real
    assert 100 < SPEC.bytes_moved_at(size) / (4800 * 1e3) < 120
