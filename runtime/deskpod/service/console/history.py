"""The console's run history: the runs the controller has logged, each as a timeline, and its export.

:func:`history_router` serves, for whoever ``authorize`` accepts (anyone else gets 401):

- ``GET /console/runs``: the newest runs (run id, task, start, status, steps, the audit
  log's verdict);
- ``GET /console/runs/{run_id}``: the run's timeline (:mod:`deskpod.service.console.timeline`);
- ``GET /console/runs/{run_id}/export``: the same as one self-contained HTML file, sent
  as a download (:func:`deskpod.service.console.replay_html.render_run`);
- ``GET /console/screenshots/{sha256}.{ext}``: a stored screenshot by its hash, and
  ``GET /console/runs/{run_id}/scene-screenshot``: a failure scene's last screen;
- ``GET /console/runs/{run_id}/recording``: the run's screen recording (MP4, byte ranges
  served for seeking), only while its SHA-256 is the one its log holds;
- ``GET /console/history.css``: the pages' style sheet.

Names from the URL reach the file system only after matching fixed patterns (a run id
of letters, digits, ``-`` and ``_``; a screenshot name of 64 hex digits and a known
extension), and only regular files inside the audit folder are read, never a link.
Every page is sent with a ``Content-Security-Policy`` of its own (:data:`PAGE_CSP`: no
script, style, images and video from the console only), ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store``; the pages hold no
script and every string from the sandbox is printed as text. Only ``GET`` routes:
nothing here changes state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from deskpod.service.console.replay_html import EXPORT_CSP, ImageSource, history_css, render_page, render_run, templates
from deskpod.service.console.timeline import (
    MEDIA_TYPES, RunTimeline, list_runs, load_run, recording_file, screenshot_path,
)
from deskpod.controller.audit_sign import AuditPublicKey
from deskpod.controller.video import MP4_MEDIA_TYPE

__all__ = [
    "Authorize", "PAGE_CSP", "history_router",
]

Authorize = Callable[[Request], Awaitable[object | None]]
"""Returns the signed-in principal for a request, or ``None`` to refuse it."""

PAGE_CSP = ("default-src 'none'; img-src 'self'; media-src 'self'; style-src 'self'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")
"""The history pages' policy: no script at all; images, video and style from the console itself."""

_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}


def _page(body: str, csp: str = PAGE_CSP, **extra: str) -> HTMLResponse:
    return HTMLResponse(body, headers={"Content-Security-Policy": csp, "Cache-Control": "no-store", **_HEADERS,
                                       **extra})


def _file(path: Path, media_type: str) -> Response:
    return Response(path.read_bytes(), media_type=media_type,
                    headers={"Cache-Control": "private, max-age=86400", "Content-Security-Policy": "default-src 'none'",
                             **_HEADERS})


def history_router(audit_dir: str | Path, authorize: Authorize, *, public_key: AuditPublicKey | None) -> APIRouter:
    """The run history's routes over the audit folder ``audit_dir``.

    Args:
        audit_dir: the controller's audit folder (``<run_id>.jsonl``, ``screenshots/``,
            ``scenes/``).
        authorize: called with every request; ``None`` refuses it (HTTP 401).
        public_key: the key logs' seals must verify with, pinned by the caller (the
            operator's, or the key the service seals with, held in memory), never a key
            file found beside the logs; ``None``: the seal is reported not checked.

    Returns:
        A router to include in the console's FastAPI app.
    """
    folder = Path(audit_dir)
    router = APIRouter()

    async def guard(request: Request) -> None:
        if await authorize(request) is None:
            raise HTTPException(status_code=401, detail="sign in to the console first")

    async def run_or_404(run_id: str) -> RunTimeline:
        run = await run_in_threadpool(load_run, folder, run_id, public_key=public_key)
        if run is None:
            raise HTTPException(status_code=404, detail="no such run")
        return run

    @router.get("/console/history.css", include_in_schema=False)
    async def stylesheet(request: Request) -> Response:
        await guard(request)
        return Response(history_css(), media_type="text/css", headers=_HEADERS)

    @router.get("/console/runs", include_in_schema=False)
    async def runs(request: Request) -> HTMLResponse:
        await guard(request)
        found, total = await run_in_threadpool(list_runs, folder, public_key=public_key)
        return _page(templates().get_template("history_list.html").render(runs=found, total=total))

    @router.get("/console/runs/{run_id}", include_in_schema=False)
    async def timeline(request: Request, run_id: str) -> HTMLResponse:
        await guard(request)
        run = await run_or_404(run_id)
        images = ImageSource(folder, inline=False)
        return _page(await run_in_threadpool(render_page, run, images, export=False))

    @router.get("/console/runs/{run_id}/export", include_in_schema=False)
    async def export(request: Request, run_id: str) -> HTMLResponse:
        await guard(request)
        run = await run_or_404(run_id)
        body = await run_in_threadpool(render_run, run, folder)
        return _page(body, EXPORT_CSP,
                     **{"Content-Disposition": f'attachment; filename="deskpod-{run.summary.run_id}.html"'})

    @router.get("/console/runs/{run_id}/scene-screenshot", include_in_schema=False)
    async def scene_screenshot(request: Request, run_id: str) -> Response:
        await guard(request)
        run = await run_or_404(run_id)
        if run.scene is None or run.scene.screenshot_file is None:
            raise HTTPException(status_code=404, detail="no scene screenshot")
        path = run.scene.screenshot_file
        return await run_in_threadpool(_file, path, MEDIA_TYPES[path.suffix[1:]])

    @router.get("/console/runs/{run_id}/recording", include_in_schema=False)
    async def recording(request: Request, run_id: str) -> Response:
        await guard(request)
        run = await run_or_404(run_id)
        path = recording_file(folder, run.summary.run_id)
        if path is None or run.recording is None or run.recording.state != "matches":
            raise HTTPException(status_code=404, detail="no recording that matches the run's log")
        return FileResponse(path, media_type=MP4_MEDIA_TYPE, content_disposition_type="inline",
                            filename=f"deskpod-{run.summary.run_id}.mp4",
                            headers={"Cache-Control": "private, no-store", "Content-Security-Policy": "default-src 'none'",
                                     **_HEADERS})

    @router.get("/console/screenshots/{name}", include_in_schema=False)
    async def screenshot(request: Request, name: str) -> Response:
        await guard(request)
        path = screenshot_path(folder, name)
        if path is None:
            raise HTTPException(status_code=404, detail="no such screenshot")
        return await run_in_threadpool(_file, path, MEDIA_TYPES[path.suffix[1:]])

    return router
