"""What the editor shows without running anything: each spec'd kernel of a document, compiled (NVRTC).

:class:`Analyzer` compiles the kernels a document's spec describes, as the document's text stands,
on a thread of its own (never the event loop, never the job's compile threads) and caches the
outcome by text and spec version. Diagnostics (compile errors, spills, spec errors) and hovers
(registers, shared memory, spills, occupancy) read it; a hover never waits for a compile.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ptxfactory.protocol import CompileFailed, KernelSpec, Resources, SpecError, load_spec, spec_path_for
from ptxfactory.protocol.expr import ExprError, evaluate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompileMessage:
    """One NVRTC message: 0-based line in the document, severity ``error``/``warning``, text."""

    line: int
    severity: str
    text: str


@dataclass(frozen=True)
class KernelAnalysis:
    """One kernel as compiled from the document: resources, or the compiler's messages; a signature mismatch."""

    kernel: str
    arch: str
    fingerprint: str
    name_line: int
    resources: Resources | None = None
    messages: tuple[CompileMessage, ...] = ()
    failed: bool = False
    mismatch: str | None = None
    threads_per_block: int | None = None
    dynamic_smem: int = 0
    instance: str | None = None  # a kernel template: the instantiation compiled (``scale<4, 256>``)


@dataclass
class FileAnalysis:
    spec_path: Path
    spec_error: SpecError | None = None
    kernels: dict[str, KernelAnalysis] = field(default_factory=dict)


_MESSAGE = re.compile(r"^([^\n()]*)\((\d+)\): (catastrophic error|error|warning)[^:]*: (.*)$", re.M)


_INSTANCE = re.compile(r"detected during instantiation of .*?\[with ([^\]]*)\]")


def compile_messages(log_text: str, source_name: str | None = None, other_line: int = 0) -> tuple[CompileMessage, ...]:
    """The compiler's ``file(LINE): error: text`` lines (NVRTC's, nvcc's, and the ``KERNEL.cu(LINE): error: ptxas: ...``
    lines that :func:`~ptxfactory.harness.compile.map_ptxas_errors` puts at an inline-PTX ``asm`` statement), as
    0-based lines; an error inside a kernel template says for which template arguments (``... (with ITEMS=0,
    BLOCK=256)``). With ``source_name`` (``KERNEL.cu``), a message from another file (a header) is put at
    ``other_line`` (0-based), its text prefixed with that file and line."""
    out = []
    found = list(_MESSAGE.finditer(log_text))
    for i, m in enumerate(found):
        severity = "warning" if m.group(3) == "warning" else "error"
        context = log_text[m.end():found[i + 1].start() if i + 1 < len(found) else len(log_text)]
        instance = _INSTANCE.search(context)
        text = m.group(4).strip() + (f" (with {instance.group(1).strip()})" if instance else "")
        line = max(int(m.group(2)) - 1, 0)
        where = m.group(1).strip()
        if source_name is not None and where and Path(where).name != source_name:
            text, line = f"{where}({m.group(2)}): {text}", other_line
        out.append(CompileMessage(line=line, severity=severity, text=text))
    return tuple(dict.fromkeys(out))


def _launch_figures(spec: KernelSpec) -> tuple[int | None, int]:
    """Threads per block and dynamic shared memory of the spec's launch, at its first check size."""
    size = spec.check.sizes[0]
    try:
        threads = 1
        for b in spec.launch.block:
            threads *= int(evaluate(b, size))
        return threads, int(evaluate(spec.launch.shared_mem, size))
    except (ExprError, TypeError, ValueError):
        return None, 0


def analyse_now(path: Path, text: str) -> FileAnalysis:
    """Compile every spec'd kernel found in ``text`` (blocking: run it on a thread). NVRTC runs in the
    compile pool's processes, never in the daemon: its memory stays out of the daemon's resident set."""
    from ptxfactory.harness.compile_pool import shared_pool
    from ptxfactory.harness.source import check_signature, find_kernels, spec_location
    from ptxfactory.search.strategy import kernel_fingerprint, original_candidate

    spec_path = spec_path_for(path)
    result = FileAnalysis(spec_path=spec_path)
    if not spec_path.exists():
        return result
    try:
        spec_file = load_spec(spec_path)
    except SpecError as exc:
        result.spec_error = exc
        return result
    for kdef in find_kernels(text):
        spec = spec_file.kernels.get(kdef.name)
        if spec is None or kdef.name in result.kernels:
            continue
        common = dict(kernel=kdef.name, arch=spec.arch, fingerprint=kernel_fingerprint(kdef.text), name_line=kdef.name_line)
        threads, smem = _launch_figures(spec)
        try:
            check_signature(spec, kdef)
        except ValueError as exc:
            where = spec_location(spec_path, kdef.name, getattr(exc, "key", "")).replace(str(spec_path), spec_path.name, 1)
            result.kernels[kdef.name] = KernelAnalysis(**common, mismatch=f"{where}: does not match the kernel: {exc}")
            continue
        original = original_candidate(spec, text)
        log_name = f"{kdef.name}.ptx" if kdef.language == "ptx" else f"{kdef.name}.cu"  # the name the compiler's log uses
        instance = original.name_expression if original.template_args else None
        compiled = shared_pool().prepare_blocking(original, spec, static=False).compiled
        if not isinstance(compiled, CompileFailed):
            result.kernels[kdef.name] = KernelAnalysis(
                **common, resources=compiled.resources, messages=tuple(m for m in compile_messages(compiled.log, log_name, kdef.name_line)
                                                                       if m.severity == "warning"),
                threads_per_block=threads, dynamic_smem=smem, instance=instance)
        else:
            messages = compile_messages(compiled.log, log_name, kdef.name_line) or (
                CompileMessage(line=kdef.name_line, severity="error", text=compiled.log.strip()[:500]),)
            result.kernels[kdef.name] = KernelAnalysis(**common, messages=messages, failed=True, threads_per_block=threads,
                                                       dynamic_smem=smem, instance=instance)
    return result


class Analyzer:
    """Cached, coalesced :func:`analyse_now` on one private thread."""

    def __init__(self, max_entries: int = 64):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ptxfactory-analysis")
        self._cache: OrderedDict[tuple, FileAnalysis] = OrderedDict()
        self._inflight: dict[tuple, asyncio.Future] = {}
        self._by_kernel: dict[tuple[str, str, str], KernelAnalysis] = {}
        self._max = max_entries

    @staticmethod
    def _key(path: Path, text: str) -> tuple:
        spec = spec_path_for(path)
        try:
            st = spec.stat()
            version = (st.st_mtime_ns, st.st_size)
        except OSError:
            version = None
        return (str(path), hashlib.sha256(text.encode()).hexdigest(), version)

    def cached(self, path: Path, text: str) -> FileAnalysis | None:
        return self._cache.get(self._key(path, text))

    def kernel(self, path: Path, kernel: str, fingerprint: str) -> KernelAnalysis | None:
        """The latest analysis of a kernel with this exact text (comments and spacing aside), from any version of the file."""
        return self._by_kernel.get((str(path), kernel, fingerprint))

    async def analyse(self, path: Path, text: str) -> FileAnalysis:
        key = self._key(path, text)
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        if key not in self._inflight:
            loop = asyncio.get_running_loop()
            self._inflight[key] = loop.run_in_executor(self._pool, analyse_now, path, text)
        fut = self._inflight[key]
        try:
            result = await asyncio.shield(fut)
        finally:
            if fut.done():
                self._inflight.pop(key, None)
        self._cache[key] = result
        for k in result.kernels.values():
            self._by_kernel[(str(path), k.kernel, k.fingerprint)] = k
        while len(self._cache) > self._max:
            self._cache.popitem(last=False)
        if len(self._by_kernel) > 8 * self._max:
            self._by_kernel.clear()
        return result

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
