"""A run's replay as one self-contained HTML file a reviewer opens offline, and the pages' templates.

:func:`render_run` turns a :class:`~deskpod.service.console.timeline.RunTimeline` into one HTML
document: the CSS inlined, each screenshot inlined once as a ``data:`` URI (by its
stored bytes and a media type fixed by its extension, never by the log), the run's screen
recording inlined as a ``data:`` video when its hash is the one the log holds and it is at most
:data:`MAX_EXPORT_VIDEO_BYTES`, and no script at all. Its ``Content-Security-Policy`` meta
(:data:`EXPORT_CSP`) allows only inline style and ``data:`` images and video, so even a string that escaped the templates could neither
run nor load anything. The file is bounded: at most :data:`MAX_EXPORT_SCREENSHOTS`
images and :data:`MAX_EXPORT_IMAGE_BYTES` of image bytes are inlined (later ones are
named by hash, and the page says what was left out).

The templates (``templates/``, Jinja2) autoescape every value: text from the sandbox
and its pages (titles, URLs, typed text) is printed as text, never as markup. The same
templates render the console's pages (:mod:`deskpod.service.console.history`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime, UTC
from importlib.resources import files
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape

from deskpod.controller.video import MP4_MEDIA_TYPE
from deskpod.service.console.timeline import MEDIA_TYPES, RunTimeline, Shot, recording_file, screenshot_path

__all__ = [
    "EXPORT_CSP", "ImageSource", "MAX_EXPORT_IMAGE_BYTES", "MAX_EXPORT_SCREENSHOTS", "MAX_EXPORT_VIDEO_BYTES",
    "MAX_MARKED_REPEATS",
    "MAX_PAGE_SCREENSHOTS",
    "history_css", "render_page", "render_run", "templates",
]

EXPORT_CSP = ("default-src 'none'; img-src data:; media-src data:; style-src 'unsafe-inline'; base-uri 'none'; "
              "form-action 'none'")
"""The exported file's policy: inline style and ``data:`` images and video, nothing else (no script)."""

MAX_EXPORT_VIDEO_BYTES = 64 * 1024 * 1024
"""A larger recording is not inlined in an exported file (the page names its file instead)."""

MAX_EXPORT_SCREENSHOTS = 100
"""Screenshots inlined in one exported file."""

MAX_EXPORT_IMAGE_BYTES = 48 * 1024 * 1024
"""Image bytes (before base64) inlined in one exported file."""

MAX_PAGE_SCREENSHOTS = 200
"""Screenshots shown as images on one timeline page."""

MAX_MARKED_REPEATS = 50
"""Times one page shows a screenshot again to mark a confirmation's point on it."""

_environment: Environment | None = None


def templates() -> Environment:
    """The Jinja2 environment of the history pages and the export (autoescape on for HTML)."""
    global _environment
    if _environment is None:
        _environment = Environment(loader=PackageLoader("deskpod.service.console", "templates"),
                                   autoescape=select_autoescape(["html"], default_for_string=True, default=True),
                                   trim_blocks=True, lstrip_blocks=True)
    return _environment


def history_css() -> str:
    """The pages' style sheet (``templates/history.css``)."""
    return files("deskpod.service.console").joinpath("templates", "history.css").read_text(encoding="utf-8")


@dataclass
class ImageSource:
    """Where a page's ``<img>`` takes each screenshot from, within a budget.

    :meth:`plan` picks, in the order the page shows them, the screenshots that get an
    image: each kept one once, until ``max_images`` (and, inlined, ``max_bytes``) are
    used. :meth:`src` then gives the first showing of a picked one its source:
    ``url_prefix + name`` on the console's pages, or a ``data:`` URI of the stored file
    (``inline``) in an export; any other showing gets none, and :meth:`why` says why.

    Args:
        audit_dir: the audit folder (for inlining).
        inline: inline the bytes as ``data:`` URIs instead of linking.
        url_prefix: the route the console serves screenshots under.
        max_images: images shown in all.
        max_bytes: image bytes inlined in all.
    """

    audit_dir: Path
    inline: bool
    url_prefix: str = "/console/screenshots/"
    max_images: int = MAX_PAGE_SCREENSHOTS
    max_bytes: int = MAX_EXPORT_IMAGE_BYTES
    picked: dict[str, int] = field(default_factory=dict)
    emitted: set[str] = field(default_factory=set)
    skipped: int = 0
    repeats: int = 0
    repeat_bytes: int = 0

    def plan(self, run: RunTimeline) -> None:
        """Pick the screenshots of ``run``'s timeline that get an image (the scene's is apart)."""
        shots = [e.shot for e in run.entries if e.shot]
        used_bytes = 0
        seen: set[str] = set()
        for shot in shots:
            if shot.name is None or shot.sha256 in seen:
                continue
            seen.add(shot.sha256)
            if len(self.picked) >= self.max_images or (self.inline and used_bytes + shot.size_bytes > self.max_bytes):
                self.skipped += 1
                continue
            used_bytes += shot.size_bytes
            self.picked[shot.sha256] = len(self.picked) + 1

    def src(self, shot: Shot, marked: bool = False) -> str | None:
        """The ``src`` of the first showing of a picked ``shot``, else ``None``; a ``marked``
        showing (a confirmation's point drawn on it) is given one again, at most
        :data:`MAX_MARKED_REPEATS` times a page (inlined: within a quarter more of ``max_bytes``)."""
        if shot.name is None or shot.sha256 not in self.picked:
            return None
        if shot.sha256 in self.emitted:
            over = self.inline and self.repeat_bytes + shot.size_bytes > self.max_bytes // 4
            if not marked or self.repeats >= MAX_MARKED_REPEATS or over:
                return None
            self.repeats += 1
            self.repeat_bytes += shot.size_bytes
        if not self.inline:
            self.emitted.add(shot.sha256)
            return self.url_prefix + shot.name
        path = screenshot_path(self.audit_dir, shot.name)
        if path is None:
            return None
        self.emitted.add(shot.sha256)
        return f"data:{shot.media_type};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"

    def scene_src(self, run: RunTimeline) -> str | None:
        """The ``src`` of the failure scene's last screen (its own file, outside the budget)."""
        if run.scene is None or run.scene.screenshot_file is None:
            return None
        if not self.inline:
            return f"/console/runs/{run.summary.run_id}/scene-screenshot"
        path = run.scene.screenshot_file
        data = path.read_bytes()
        return f"data:{MEDIA_TYPES[path.suffix[1:]]};base64,{base64.b64encode(data).decode('ascii')}"

    def recording_src(self, run: RunTimeline) -> str | None:
        """The ``src`` of the run's recording: only one whose hash is the one its log holds; inlined
        when at most :data:`MAX_EXPORT_VIDEO_BYTES` (``None``: none to show)."""
        if run.recording is None or run.recording.state != "matches":
            return None
        if not self.inline:
            return f"/console/runs/{run.summary.run_id}/recording"
        path = recording_file(self.audit_dir, run.summary.run_id)
        if path is None or path.stat().st_size > MAX_EXPORT_VIDEO_BYTES:
            return None
        return f"data:{MP4_MEDIA_TYPE};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"

    def why(self, shot: Shot) -> str:
        """Why ``shot`` has no image here."""
        if shot.name is None:
            return "not kept (the policy's screenshot retention, or pruned)"
        if shot.sha256 in self.emitted:
            return "(the same screen as shown above)"
        return "not shown: this page's image limit was reached"

    def notes(self) -> list[str]:
        """What the budget left out, in words (empty when nothing was)."""
        if not self.skipped:
            return []
        return [f"{self.skipped} screenshot(s) are not shown as images: at most {self.max_images} images"
                + (f" and {self.max_bytes} bytes of them" if self.inline else "") + " per page"]


def render_page(run: RunTimeline, images: ImageSource, *, export: bool) -> str:
    """The timeline of ``run`` as HTML: the console's page, or (``export``) the self-contained file.

    Raises:
        OSError: a screenshot file cannot be read (``images.inline``).
    """
    images.plan(run)
    return templates().get_template("history_run.html").render(
        run=run, images=images, export=export, notes=[*run.notes, *images.notes()], csp=EXPORT_CSP,
        css=history_css() if export else "", exported=datetime.now(UTC).isoformat(timespec="seconds"))


def render_run(run: RunTimeline, audit_dir: str | Path, *, max_images: int = MAX_EXPORT_SCREENSHOTS,
               max_image_bytes: int = MAX_EXPORT_IMAGE_BYTES) -> str:
    """The run as one self-contained HTML file (screenshots and CSS inlined, no script).

    Args:
        run: the run (:func:`deskpod.service.console.timeline.load_run`).
        audit_dir: its audit folder, where the screenshots are read from.
        max_images: screenshots inlined at most.
        max_image_bytes: image bytes inlined at most.

    Returns:
        The HTML document (UTF-8 text).

    Raises:
        OSError: a screenshot file cannot be read.
    """
    images = ImageSource(Path(audit_dir), inline=True, max_images=max_images, max_bytes=max_image_bytes)
    return render_page(run, images, export=True)
