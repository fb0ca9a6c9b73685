"""The job commands (``workspace/executeCommand``) and the ways to cancel a job.

- ``ptxfactory.optimise [{"uri", "kernel", "wait"?}]`` queues a job on the engine with the
  editor's text of the document, and answers ``{"job_id", "token"}`` at once (or, with ``wait``,
  the job's :class:`JobInfo` when it ends; ``$/cancelRequest`` on that request cancels the job).
  Every session with the document open (and this one) shows the job's progress.
- ``ptxfactory.cancel [{"job_id"}]``, and ``window/workDoneProgress/cancel`` on a job's token in
  any session, stop the job after the candidate in flight; its progress ends "cancelled".
- ``ptxfactory.jobs [{"uri"?, "active"?, "limit"?}]`` lists jobs; ``ptxfactory.watch [{"job_id"}]``
  sends this session the job's progress.

``shutdown`` and ``exit`` end only the session: jobs belong to the engine and carry on.
"""
from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types
from pydantic import BaseModel, ValidationError
from pygls.exceptions import JsonRpcInvalidParams

from ptxfactory.protocol.lsp import (
    CANCEL, JOBS, OPTIMISE, WATCH, CancelArgs, CancelResult, JobsArgs, JobsResult, OptimiseArgs, OptimiseResult, WatchArgs,
    WatchResult,
)

from .session import PtxServer
from .text import cuda_path


def register(server: PtxServer) -> None:
    server.command(OPTIMISE)(optimise)
    server.command(CANCEL)(cancel)
    server.command(JOBS)(jobs)
    server.command(WATCH)(watch)
    server.feature(types.WINDOW_WORK_DONE_PROGRESS_CANCEL)(work_done_progress_cancel)


async def optimise(ls: PtxServer, *args: Any) -> dict:
    a = parse(OPTIMISE, OptimiseArgs, args)
    path = cuda_path(a.uri)
    if path is None:
        raise JsonRpcInvalidParams(f"{OPTIMISE}: {a.uri} is not a file: URI of a .cu or .cuh file")
    request_id = ls.protocol.msg_id
    job, already = await ls.engine.submit(path, a.uri, a.kernel, open_text(ls, a.uri))
    ls.watching.add(job.job_id)
    ls.follow(job)  # sends window/workDoneProgress/create before this answer
    if not a.wait:
        return OptimiseResult(job_id=job.job_id, token=job.token, already_running=already).model_dump()
    if request_id is not None and not already:  # cancelling the wait cancels the job this request started
        ls.cancel_hooks[request_id] = lambda: asyncio.ensure_future(ls.engine.cancel(job.job_id))
    try:
        await job.ended.wait()
    finally:
        ls.cancel_hooks.pop(request_id, None)
    return job.info().model_dump()


async def cancel(ls: PtxServer, *args: Any) -> dict:
    a = parse(CANCEL, CancelArgs, args)
    job, stopped = await ls.engine.cancel(a.job_id)
    job = job or await ls.engine.find(a.job_id)
    if job is None:
        raise JsonRpcInvalidParams(f"{CANCEL}: no job {a.job_id!r}")
    return CancelResult(job_id=job.job_id, cancelled=stopped, state=job.state).model_dump()


async def work_done_progress_cancel(ls: PtxServer, params: types.WorkDoneProgressCancelParams) -> None:
    job_id = ls.job_by_token(params.token)
    if job_id is not None:
        await ls.engine.cancel(job_id)


async def jobs(ls: PtxServer, *args: Any) -> dict:
    a = parse(JOBS, JobsArgs, args or ({},))
    return JobsResult(jobs=await ls.engine.list_jobs(uri=a.uri, active=a.active, limit=a.limit)).model_dump()


async def watch(ls: PtxServer, *args: Any) -> dict:
    a = parse(WATCH, WatchArgs, args)
    job = ls.engine.get(a.job_id) or await ls.engine.find(a.job_id)
    if job is None:
        raise JsonRpcInvalidParams(f"{WATCH}: no job {a.job_id!r}")
    relay = None
    if not job.final:
        ls.watching.add(job.job_id)
        relay = ls.follow(job)
    return WatchResult(job=job.info(), token=relay.token if relay else None).model_dump()


def parse(command: str, model: type[BaseModel], args: tuple[Any, ...]):
    """The command's one argument object, validated; ``InvalidParams`` naming the field otherwise."""
    if len(args) != 1:
        raise JsonRpcInvalidParams(f"{command} takes one argument object, got {len(args)} arguments")
    try:
        return model.model_validate(_plain(args[0]))
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "argument"
        raise JsonRpcInvalidParams(f"{command}: {where}: {err['msg']}") from None


def _plain(obj: Any) -> Any:
    if hasattr(obj, "_asdict"):
        return {k: _plain(v) for k, v in obj._asdict().items()}
    return obj


def open_text(ls: PtxServer, uri: str) -> str | None:
    """The editor's text of ``uri`` (unsaved edits included) when this session has it open; None lets the search read the file."""
    doc = ls.workspace.text_documents.get(uri)
    return doc.source if doc is not None else None
