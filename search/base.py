"""The generator interface: one method, ``propose``, from a context to candidates."""
from __future__ import annotations

import re

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ptxfactory.harness.source import KernelDef, SignatureMismatch, check_signature, replace_kernel
from ptxfactory.protocol import ArgSpec, Candidate, GpuFacts, KernelSpec, LaunchConfig


@dataclass(frozen=True)
class GenContext:
    """What a generator may see: the spec (never the held-out sizes), the parent's source and kernel
    (``original``: the user's kernel, or a later best). The search orders proposals itself
    (:mod:`ptxfactory.search.priors`); generators return their space in its natural order.

    ``facts``: the GPU the job runs on (``backend.facts()``), None without one (a compile-only job, most
    tests). A generator may read only what is fixed for a GPU (``sm_count``, ``arch``, ``l2_bytes``,
    ``name``), never what is measured (``copy_gbps``, clocks, temperature), so that its candidates' keys
    are the same for every job on that GPU (a resumed job takes the same path); without facts it proposes
    what does not depend on them."""

    spec: KernelSpec
    source: str
    kernel: KernelDef
    original: Candidate
    facts: GpuFacts | None = None


class Generator(Protocol):
    """Proposes candidates. ``name`` is recorded with every experiment it produces.

    Each candidate's ``params`` are its knob values (JSON scalars), what the lesson store learns from.
    Knobs shared by every generator, so that lessons carry over between kernel classes: ``block``
    (threads per block), ``vec`` (bytes per vector access: 4, 8, 16), ``hint`` (``"ldg"``, ``"stream"``,
    ``"plain"``), ``unroll``, ``math`` (``"fast"``: approximate intrinsics, ``"precise"``). Knobs that
    choose *which function* is computed (``norm``, ``epilogue``) are learnt per kernel class only
    (:data:`ptxfactory.search.priors.FUNCTION_KNOBS`). Families return their tuning space in its
    natural order; the search orders it.
    """

    name: str

    def propose(self, ctx: GenContext) -> list[Candidate]:
        """Candidates derived from ``ctx.original``; an empty list when the generator does not apply."""
        ...


Config = TypeVar("Config")


class NoFit(Exception):
    """Raised inside a family's ``match_spec`` (wrapped by :func:`fit_check`) with why its skeleton does not fit a spec,
    in the spec's terms (an argument's name, role, dtype or shape): what the report says when no family fits."""


def fit_check(match: Callable[[KernelSpec], object]) -> Callable[[KernelSpec], object]:
    """Decorator of a family's ``match_spec(spec)``: a :class:`NoFit` raised inside it returns None, as every caller
    expects, and ``match_spec.why(spec)`` is its reason (None where the spec matches). A spec whose launch policy is not
    ``"free"`` fits no family (each writes its own launch) and never reaches ``match``."""

    def checked(spec: KernelSpec):
        if spec.launch.policy != "free":
            raise NoFit(f"the launch policy is {spec.launch.policy!r}: the skeleton chooses its own launch")
        return match(spec)

    def matched(spec: KernelSpec):
        try:
            return checked(spec)
        except NoFit:
            return None

    def why(spec: KernelSpec) -> str | None:
        try:
            checked(spec)
        except NoFit as exc:
            return str(exc)
        return None

    matched.why = why  # type: ignore[attr-defined]
    matched.__doc__, matched.__name__, matched.__wrapped__ = match.__doc__, match.__name__, match  # type: ignore[attr-defined]
    return matched


def kernel_refusal(ctx: GenContext) -> str | None:
    """Why no family takes ``ctx``'s kernel whatever its spec (what :func:`family_candidates` refuses): a template, or a
    signature that differs from the spec's arguments; None otherwise."""
    if ctx.kernel.text.lstrip().startswith("template"):
        return "the kernel is a template (a family writes a plain kernel in its place)"
    try:
        check_signature(ctx.spec, ctx.kernel)
    except SignatureMismatch as exc:
        return f"its signature differs from the spec: {exc}"
    return None


_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
# an exponential as naive kernels call it: expf, __expf, exp, exp2f, exp10f, hexp / h2exp (half), std::exp
EXP_CALL = r"\b(?:__|h2?)?exp(?:2|10)?f?\s*\("
# A natural, base-2 or base-10 logarithm (``logf``, ``__logf``, ``log2f``, ``hlog``, ``log1pf``): a log-softmax's store.
LOG_CALL = r"\b(?:__|h2?)?log(?:2|10|1p)?f?\s*\("


def scalars_unused(spec, kernel_text: str, used: set[str]) -> bool:
    """Whether every scalar argument of ``spec`` outside ``used`` (the ones a family's skeleton reads) goes unmentioned
    in the kernel's body (``kernel_text`` after its first ``{``, comments left out): a family that passes such a
    scalar through unused computes the kernel's function only if the kernel ignores it too (a softmax's temperature
    ``x / temp`` is not a scalar it may drop)."""
    body = _COMMENTS.sub(" ", kernel_text[kernel_text.find("{"):] if "{" in kernel_text else "")
    return not any(re.search(rf"\b{re.escape(a.name)}\b", body) for a in spec.args if not a.is_buffer and a.name not in used)


def source_mentions(source: str, pattern: str) -> bool:
    """Whether ``source`` (a whole translation unit, comments left out) matches the regular expression ``pattern``.

    A family's evidence that the kernel computes what its skeleton does (a softmax calls an exponential; a tanh-GELU
    epilogue, ``tanh``): a family cannot read the user's math, but it can see which functions it calls, and a
    candidate proposed without that evidence computes another function, which only a GPU's verification would tell.
    The whole unit is read, so a ``__device__`` helper beside the kernel counts."""
    return re.search(pattern, _COMMENTS.sub(" ", source)) is not None


REDUCTION = r"\b(?:for|while|do)\b|__shfl|__syncthreads|__syncwarp|\batomic\w+\s*\(|__reduce_\w+_sync|cooperative_groups|cub::"


def combines_elements(source: str) -> bool:
    """Whether ``source`` (the kernel and the helpers it calls; comments left out) has anything that combines several
    elements into one value: a loop, a warp shuffle or vote, a barrier, an atomic. Without one each output is a
    function of its own element (an activation), which no row family's skeleton (a sum over the row) computes."""
    return source_mentions(source, REDUCTION)


def walks_columns(kernel_text: str, buffer: str) -> bool:
    """Whether the kernel reads ``buffer`` down columns: some load ``buffer[e]`` inside a ``for`` loop steps by more
    than one element per iteration (``x[i * N + j]`` over ``i``) and none inside any loop by exactly one. A row
    family's skeleton (a softmax over the last dimension) computes another function for such a kernel (a softmax over
    dimension 0). False where the loads are not read (through a pointer alias, a vector type) or no loop reads it."""
    from .generators.transform import syntax as sx  # (the transform package imports this module)
    from .generators.transform.affine import poly, split

    fn = sx.kernel_function(sx.parse(kernel_text.encode()).root_node)
    if fn is None:
        return False
    strided = contiguous = 0
    for loop in (n for n in sx.walk(fn) if n.type == "for_statement"):
        init = loop.child_by_field_name("initializer")
        names = sx.declared_names(init) if init is not None and init.type == "declaration" else set()
        if len(names) != 1:
            continue
        var = next(iter(names))
        for n in sx.walk(loop.child_by_field_name("body") or loop):
            if n.type != "subscript_expression" or not sx.is_ident(sx.uncast(n.child_by_field_name("argument")), buffer):
                continue
            p = poly(sx.subscript_index(n))
            parts = split(p, var) if p is not None else None
            if parts is None or not parts[0]:
                continue
            if parts[0] == {(): 1}:
                contiguous += 1
            else:
                strided += 1
    return strided > 0 and contiguous == 0


def family_candidates(ctx: GenContext, fits: bool, configs: Iterable[Config],
                      instantiate: Callable[[Config], Candidate]) -> list[Candidate]:
    """What every family's ``propose`` does once it has matched the spec: nothing when it does not
    ``fit``, the kernel is a template or its signature differs from the spec; else one candidate per
    configuration, in order, without repeating a key."""
    if not fits or kernel_refusal(ctx) is not None:
        return []
    out, keys = [], set()
    for cfg in configs:
        cand = instantiate(cfg)
        if cand.key not in keys:
            keys.add(cand.key)
            out.append(cand)
    return out


def own_names(source: str, kernel_text_before: str, kernel_text: str) -> str:
    """``kernel_text`` with each ``ptxf_`` name that the rest of ``source`` (all but ``kernel_text_before``, the kernel
    it replaces) already uses renamed with the first suffix (``_2``, ``_3``, ...) that none of them has there: a file
    holding a family's candidate already (an applied rewrite run again, a second kernel of the file rewritten) would
    otherwise define its helpers twice. The renaming is within ``kernel_text`` only, which is self-contained."""
    rest = source.replace(kernel_text_before, "")
    clash = sorted(set(re.findall(r"\bptxf_\w+", kernel_text)) & set(re.findall(r"\bptxf_\w+", rest)), key=len, reverse=True)
    if not clash:
        return kernel_text
    n = 2
    while any(re.search(rf"\b{name}_{n}\b", rest) for name in clash):
        n += 1
    return re.sub(r"\b(" + "|".join(clash) + r")\b", rf"\g<1>_{n}", kernel_text)


def family_candidate(ctx: GenContext, generator: str, kernel_text: str, grid: str, block: int, description: str,
                     params: dict, shared_mem: str | int = 0) -> Candidate:
    """A family's candidate: ``kernel_text`` (its ``ptxf_`` names made the file's own: :func:`own_names`) in place of
    the parent's kernel, a 1-D launch of ``grid`` (an expression) by ``block`` threads with ``shared_mem`` bytes of
    dynamic shared memory (an expression; default none), the parent's compile options."""
    kernel_text = own_names(ctx.source, ctx.kernel.text, kernel_text)
    return Candidate(
        kernel_name=ctx.original.kernel_name,
        source=replace_kernel(ctx.source, ctx.kernel, kernel_text),
        kernel_text=kernel_text,
        launch=LaunchConfig(grid=[grid], block=[block], shared_mem=shared_mem),
        options=list(ctx.original.options),
        generator=generator,
        description=description,
        params=params,
        parent=ctx.original.key,
    )


SIZE_DTYPES = ("i32", "i64", "u32")  # what a family accepts for a size argument (M, N)


def size_args(scalars: list[ArgSpec], *symbols: str) -> tuple[ArgSpec, ...] | None:
    """For each size symbol, the one scalar argument whose value is that symbol (``int M`` passing ``M``),
    in the order given; None when a symbol has none, several, or one that is not an integer."""
    out = []
    for sym in symbols:
        found = [a for a in scalars if isinstance(a.value, str) and a.value.strip() == sym]
        if len(found) != 1 or found[0].dtype.value not in SIZE_DTYPES:
            return None
        out.append(found[0])
    return tuple(out)


def size_names(spec) -> dict[str, str]:
    """Size symbol -> the name of an integer scalar argument whose value is exactly that symbol (any one of several
    that pass it): what :func:`ptxfactory.protocol.expr.to_c` needs to write a spec expression in the kernel's terms."""
    out: dict[str, str] = {}
    for a in spec.args:
        if not a.is_buffer and isinstance(a.value, str) and a.value.strip().isidentifier() and a.dtype.value in SIZE_DTYPES:
            out.setdefault(a.value.strip(), a.name)
    return out


def shape_dims(shape) -> tuple:
    """A buffer's shape with each symbolic dimension stripped of spaces (numbers kept as they are)."""
    return tuple(d.strip() if isinstance(d, str) else d for d in shape or [])


def square_note(bufs) -> str:
    """`` (A is [N, N]: a square buffer's rows and columns are one size, which the family does not take)`` for the
    first buffer of ``bufs`` (spec args) whose two dimensions are one symbol, else ``""``: why a family that wants
    ``x[R, C]`` counted none."""
    sq = next((a for a in bufs if len(shape_dims(a.shape)) == 2 and isinstance(shape_dims(a.shape)[0], str)
               and shape_dims(a.shape)[0] == shape_dims(a.shape)[1]), None)
    return "" if sq is None else (f" ({sq.name} is [{', '.join(shape_dims(sq.shape))}]: a square buffer's rows and "
                                  "columns are one size, which the family does not take)")


def render_params(kernel: KernelDef) -> str:
    """The kernel's parameter list as a family's skeleton declares it: the user's names, types and order,
    ``const`` kept, every pointer ``__restrict__`` (the spec's buffers never overlap)."""
    out = []
    for p in kernel.params:
        const = "const " if p.is_const else ""
        out.append(f"{const}{p.type}* __restrict__ {p.name}" if p.is_pointer else f"{const}{p.type} {p.name}")
    return ", ".join(out)


def kernel_linkage(kernel: KernelDef) -> str:
    """``'extern "C" '`` when the kernel's own definition carries that linkage (not an ``extern "C" {`` block), else ``''``."""
    return 'extern "C" ' if re.match(r'extern\s+"C"\s*(?!\{)', kernel.text.lstrip()) else ""


def pointer_declaration(name: str) -> str:
    """The regular expression of a pointer declared from ``name`` (``float* out = y + row * N;``, ``const __half* xr =
    x + (size_t)r * N;``), its group 1 the pointer's name: a buffer's stores or loads made through a row pointer."""
    return rf"\*\s*(?:const\s+)?(?:__restrict__\s+)?([A-Za-z_]\w*)\s*=[^;=]*(?<![\w.]){re.escape(name)}(?!\w)"


def pointer_aliases(text: str, name: str) -> list[str]:
    """The pointers ``text`` (comments left out) declares from the buffer ``name`` (:func:`pointer_declaration`),
    in order of declaration: the names its elements are also stored or read through."""
    code = _COMMENTS.sub(" ", text)
    return [a for a in re.findall(pointer_declaration(name), code) if a != name]


def stored_values(text: str, name: str) -> list[str]:
    """The right-hand sides of the statements in ``text`` (comments left out) that store into ``name[...]``
    (``=`` and compound assignments, not ``==``), each followed by the definitions of the plain identifiers
    it reads (``rstd[r] = inv;`` gives ``inv`` and ``inv = rsqrtf(var + eps)``'s right-hand side): a family's
    evidence of what a kernel writes to an output it cannot tell from the signature (a mean, a variance)."""
    code = _COMMENTS.sub(" ", text)
    out = []
    for m in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*\[[^;]*?\]\s*[-+*/]?=(?!=)\s*([^;]*);", code):
        rhs = m.group(1).strip()
        defs = []
        for ident in set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)(?!\s*[\[(\w])", rhs)):
            defs += [d.group(1).strip() for d in re.finditer(rf"(?<![\w.]){re.escape(ident)}\s*[-+*/]?=(?!=)\s*([^;]*);", code)]
        out.append(" ; ".join([rhs] + defs))
    return out
