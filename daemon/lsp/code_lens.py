"""``textDocument/codeLens``: "Optimise kernel" above each ``__global__`` function that the spec describes,
and "Show report", "Show PTX" and "Show SASS" beside it once a job on that kernel has ended with results
(``ptxfactory.report``, ``ptxfactory.show``). A ``.ptx`` file's ``.entry`` kernels get them too.

Kernels come from the open document's text; the spec (``<file>.toml``) is read from disk. A
kernel gets a lens when the spec has a ``[kernel.NAME]`` table for it. A spec that fails to
validate still names its tables, so the lens stays and the command reports the error (file, line).
"""
from __future__ import annotations

import asyncio
import re
from pathlib import Path

from lsprotocol import types

from ptxfactory.harness.source import find_kernels
from ptxfactory.protocol import SpecError, load_spec, spec_path_for
from ptxfactory.protocol.lsp import OPTIMISE, REPORT, SHOW, OptimiseArgs, ReportArgs, ShowArgs

from ..jobs import path_key
from .session import PtxServer
from .text import cuda_path, position_at

TITLE = "Optimise kernel"
REPORT_TITLE = "Show report"
SHOW_TITLE = "Show"  # "Show PTX", "Show SASS"
_TABLE = re.compile(r"^\s*\[\s*kernel\.([A-Za-z_]\w*)\s*[\].]", re.M)


def register(server: PtxServer) -> None:
    server.feature(types.TEXT_DOCUMENT_CODE_LENS, types.CodeLensOptions(resolve_provider=False))(code_lens)


async def code_lens(ls: PtxServer, params: types.CodeLensParams) -> list[types.CodeLens] | None:
    uri = params.text_document.uri
    path = cuda_path(uri)
    if path is None:
        return None
    described = await described_kernels_off_loop(spec_path_for(path))
    if not described:
        return []
    text = ls.workspace.get_text_document(uri).source
    lenses = []
    for kernel in find_kernels(text):
        if kernel.name in described:
            start = position_at(text, kernel.start_byte, ls.position_encoding)
            args = OptimiseArgs(uri=uri, kernel=kernel.name).model_dump(exclude_defaults=True)
            lenses.append(types.CodeLens(
                range=types.Range(start=start, end=start),
                command=types.Command(title=TITLE, command=OPTIMISE, arguments=[args]),
            ))
            job = await ls.engine.latest(path_key(uri), kernel.name)
            if job is not None and job.summary is not None:
                best = job.faster()
                label = f"{REPORT_TITLE} ({best[0].result.speedup:.2f}x{' simulated' if best[0].result.simulated else ''})" if best else REPORT_TITLE
                lenses.append(types.CodeLens(
                    range=types.Range(start=start, end=start),
                    command=types.Command(title=label, command=REPORT, arguments=[ReportArgs(job_id=job.job_id).model_dump(exclude_defaults=True)]),
                ))
                for view in ("ptx", "sass"):  # the best's (else the original's) beside the original's: lsp/virtual_docs.py
                    lenses.append(types.CodeLens(
                        range=types.Range(start=start, end=start),
                        command=types.Command(title=f"{SHOW_TITLE} {view.upper()}", command=SHOW,
                                              arguments=[ShowArgs(job_id=job.job_id, view=view).model_dump(exclude_defaults=True)]),
                    ))
    return lenses


_DESCRIBED: dict[Path, tuple[tuple[int, int, int], frozenset[str]]] = {}


async def described_kernels_off_loop(spec_path: Path) -> frozenset[str]:
    """:func:`described_kernels`, parsed on a worker thread (a spec is user input: never parsed on the event loop)
    and cached by the file's (inode, size, mtime); empty when there is no spec file."""
    try:
        st = spec_path.stat()
    except OSError:
        return frozenset()
    stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _DESCRIBED.get(spec_path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    names = frozenset(await asyncio.to_thread(described_kernels, spec_path))
    if len(_DESCRIBED) > 256:
        _DESCRIBED.clear()
    _DESCRIBED[spec_path] = (stamp, names)
    return names


def described_kernels(spec_path: Path) -> set[str]:
    """Names of the spec's ``[kernel.NAME]`` tables; empty when there is no spec file."""
    try:
        return set(load_spec(spec_path).kernels)
    except SpecError:
        try:
            return set(_TABLE.findall(spec_path.read_text()))
        except (OSError, UnicodeDecodeError):
            return set()
