"""Caps of the daemon wire: message sizes, counts, lengths (bytes, characters, seconds).

Every reply field the controller reads has a cap here; the daemon cuts page-derived
strings to them before it builds a reply.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_CONTENT_BYTES",
    "DEFAULT_EXEC_OUTPUT_BYTES",
    "DEFAULT_EXEC_OUTPUT_LINES",
    "DEFAULT_READ_BYTES",
    "MAX_ACTIONS_PER_REQUEST",
    "MAX_AX_BYTES",
    "MAX_AX_NAME_CHARS",
    "MAX_AX_NODES",
    "MAX_CONSOLE_MESSAGES",
    "MAX_CONSOLE_TEXT_CHARS",
    "MAX_CONTENT_BYTES",
    "MAX_DIALOG_CHARS",
    "MAX_EXEC_OUTPUT_BYTES",
    "MAX_EXEC_OUTPUT_LINES",
    "MAX_EXEC_STREAM_BYTES",
    "MAX_EXEC_TIMEOUT_S",
    "MAX_FRAMES",
    "MAX_IMAGE_SIDE_PX",
    "MAX_LABEL_CHARS",
    "MAX_LIST_ENTRIES",
    "MAX_MANIFEST_CONTENT_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_NETWORK_ERROR_CHARS",
    "MAX_NETWORK_REQUESTS",
    "MAX_PAGE_LOG_BYTES",
    "MAX_PAGE_TEXT_BYTES",
    "MAX_PAGE_TEXT_CHARS",
    "MAX_PATH_CHARS",
    "MAX_READ_BYTES",
    "MAX_REPLY_PATHS",
    "MAX_SCAN_TEXT_CHARS",
    "MAX_SCREENSHOT_BASE64_BYTES",
    "MAX_SCREENSHOT_BYTES",
    "MAX_SCREENSHOT_PIXELS",
    "MAX_SCROLL_NOTCHES",
    "MAX_SEED_ARCHIVE_BYTES",
    "MAX_SELECT_OPTIONS",
    "MAX_SERVER_MESSAGE_BYTES",
    "MAX_SNAPSHOT_BYTES",
    "MAX_SNAPSHOT_CHARS",
    "MAX_TABS",
    "MAX_TEST_REPORT_BYTES",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_SOURCES",
    "MAX_TITLE_CHARS",
    "MAX_URL_CHARS",
    "MAX_WAIT_S",
    "MESSAGE_SIZE_HEADER",
    "MIN_CLIENT_MESSAGE_BYTES",
    "MIN_CONTENT_BYTES",
    "MIN_SCREENSHOT_BASE64_BYTES",
    "PROTOCOL_VERSION",
]

PROTOCOL_VERSION = "1"
"""Sent in :class:`Hello`; a client refuses a daemon speaking another version."""

MAX_MESSAGE_BYTES = 1_048_576
"""Largest client message the daemon reads (1 MiB); larger ones close the socket."""

MAX_SERVER_MESSAGE_BYTES = 64 * 1_048_576
"""Largest daemon message a client reads (64 MiB), and the reply size the daemon keeps
to when a client declares none (see :data:`MESSAGE_SIZE_HEADER`)."""

MESSAGE_SIZE_HEADER = "Deskpod-Max-Message-Bytes"
"""Header of the websocket upgrade in which a client declares the largest message it
reads (decimal bytes, :data:`MIN_CLIENT_MESSAGE_BYTES` to :data:`MAX_SERVER_MESSAGE_BYTES`).
No daemon reply on that connection is longer (the daemon shrinks page text, the
accessibility summary and images to fit, else answers a ``message_too_large`` error);
without the header the daemon keeps to :data:`MAX_SERVER_MESSAGE_BYTES`. A value out of
range or not a number is refused at the upgrade (HTTP 403, like a bad token)."""

MIN_CLIENT_MESSAGE_BYTES = 262_144
"""Smallest message size a client may declare (256 KiB: an error reply, a small screenshot)."""

MAX_ACTIONS_PER_REQUEST = 100
"""Most actions one :class:`ActRequest` may carry."""

MAX_TEXT_CHARS = 10_000
"""Longest text one ``type`` action may type."""

MAX_WAIT_S = 60.0
"""Longest single ``wait`` action, seconds."""

MAX_SCROLL_NOTCHES = 100
"""Largest wheel-notch count per axis in one ``scroll`` action."""

MAX_URL_CHARS = 8192
"""Longest URL a reply carries (an observation's URL, a tab's, a link's ``href``, a
form's action); the daemon cuts longer ones, the controller refuses a reply with one."""

MAX_TITLE_CHARS = 2000
"""Longest page or tab title a reply carries (cut by the daemon, refused beyond by the controller)."""

MAX_TABS = 100
"""Most tabs an observation lists (the active one first); the daemon lists the first ones."""

MAX_DIALOG_CHARS = 2000
"""Longest JavaScript dialog type or message a reply carries."""

MAX_AX_NAME_CHARS = 200
"""Longest name or value of an accessibility node the daemon reports (longer ones are clipped)."""

MAX_LABEL_CHARS = 2000
"""Longest element description string a reply carries (tag, role, name, text, input
type, autocomplete, an accessibility node's role, name or value)."""

MAX_SELECT_OPTIONS = 256
"""Most options of a ``<select>`` an :class:`~deskpod.protocol.ElementInfo` lists (the first
ones); each option's value and label are cut to :data:`MAX_AX_NAME_CHARS`."""

MAX_PAGE_TEXT_CHARS = 1_000_000
"""Longest page text a reply carries (and the largest ``max_text_chars`` a request may ask)."""

MAX_SCAN_TEXT_CHARS = 200_000
"""Longest text of one :class:`TextSource` a reply carries, and the largest
``max_scan_chars`` (the daemon's budget for all of them) a request may ask."""

MAX_TEXT_SOURCES = 16
"""Most :class:`TextSource` entries a reply carries."""

MAX_PAGE_TEXT_BYTES = 1_048_576
"""Most UTF-8 bytes of page text a reply carries (1 MiB); the daemon cuts longer text
and says so in :attr:`Observation.truncated <deskpod.protocol.Observation.truncated>`."""

MAX_AX_NODES = 5000
"""Most accessibility-tree nodes a reply carries (and the largest ``max_ax_nodes``)."""

MAX_FRAMES = 32
"""Most frames of a page (the top document included) the daemon reads for its text or
accessibility tree, and most unread frames a reply names."""

MAX_SNAPSHOT_CHARS = 200_000
"""Most characters of an observation's element snapshot (:attr:`Observation.snapshot`):
at most ``max_ax_nodes`` lines, cut at a line's end below this (``truncated.snapshot``)."""

MAX_CONSOLE_MESSAGES = 200
"""Most console messages the daemon keeps for the active tab's page (the newest: older ones
are counted in ``ConsoleLog.dropped``), and most one reply carries."""

MAX_CONSOLE_TEXT_CHARS = 2000
"""Longest text of one console message the daemon keeps and a reply carries (cut before it is kept)."""

MAX_NETWORK_REQUESTS = 200
"""Most network requests the daemon keeps for the active tab's page (the newest: older ones
are counted in ``NetworkLog.dropped``), and most one reply carries."""

MAX_NETWORK_ERROR_CHARS = 128
"""Longest error text of a failed request a reply carries (e.g. ``net::ERR_CONNECTION_REFUSED``)."""

MAX_PAGE_LOG_BYTES = 262_144
"""Most bytes the console log, and apart from it the network log, of one reply takes as JSON
(256 KiB; a sixteenth of the client's message size when that is less): the newest entries that
fit are sent, the others counted as dropped."""

DEFAULT_CONTENT_BYTES = 786_432
"""Default ``max_content_bytes`` (768 KiB): the page content of one reply (its page text,
accessibility summary, element snapshot, text sources and console and network logs, as
JSON) takes at most this many bytes unless the request asks for more, so a default reply
without its screenshot (which has its own caps) stays under 1 MiB on any page."""

MIN_CONTENT_BYTES = 65_536
"""Smallest ``max_content_bytes`` a request may ask (64 KiB)."""

MAX_CONTENT_BYTES = 4 * 1_048_576
"""Largest ``max_content_bytes`` a request may ask (4 MiB: about the sum of the parts' own
caps); the client's declared message size still bounds the whole reply."""

MAX_AX_BYTES = 1_048_576
"""Most bytes the accessibility summary of a reply takes as JSON (1 MiB); the daemon
stops adding nodes there and says so in ``Observation.truncated``."""

MAX_IMAGE_SIDE_PX = 8000
"""Longest side, in pixels, of any screenshot or zoom image, of the model space and of
the screen: the model vendors refuse images over 8000 px on a side. A larger screen is
refused at the daemon's start (``DESKPOD_SCREEN_SIZE``), a larger model size at ``configure``."""

MAX_SCREENSHOT_BASE64_BYTES = 5_000_000
"""Longest base64 text of one screenshot or zoom image (5 MB: the vendors refuse a
larger base64 image). The daemon re-encodes (JPEG, lower quality) and then scales a
larger image down to stay within it, or within the lower limit ``configure`` sets."""

MIN_SCREENSHOT_BASE64_BYTES = 65_536
"""Lowest image limit ``configure`` may set (64 KiB of base64)."""

MAX_SCREENSHOT_BYTES = MAX_SCREENSHOT_BASE64_BYTES // 4 * 3
"""Largest encoded screenshot (PNG, JPEG or WebP bytes, before base64) a reply may carry:
the bytes whose base64 is :data:`MAX_SCREENSHOT_BASE64_BYTES` long."""

MAX_SCREENSHOT_PIXELS = 7680 * 4320
"""Most pixels (width × height) a screenshot, the model space or the screen may have: an
8K screen. The controller checks an image's declared size against it before decoding
anything (decompression bombs)."""

MAX_SEED_ARCHIVE_BYTES = 700_000
"""Largest seed archive (gzip'd tar, before base64): its base64 fits in one message."""

MAX_PATH_CHARS = 4096
"""Longest path a workspace request may name."""

MAX_LIST_ENTRIES = 10_000
"""Most entries one ``list_dir`` reply may carry."""

DEFAULT_READ_BYTES = 262_144
"""Default cap on the content one ``read_file`` returns (256 KiB)."""

MAX_READ_BYTES = 8 * 1_048_576
"""Largest cap a ``read_file`` may ask for (8 MiB)."""

MAX_EXEC_TIMEOUT_S = 600.0
"""Longest timeout an ``exec`` or ``run_tests`` may ask for, seconds."""

MAX_EXEC_OUTPUT_BYTES = 4 * 1_048_576
"""Largest diff text a ``workspace_diff`` may ask for (4 MiB)."""

DEFAULT_EXEC_OUTPUT_BYTES = 10_240
"""Bytes of each of stdout and stderr an ``exec`` returns by default (10 KiB: head and tail, half each)."""

DEFAULT_EXEC_OUTPUT_LINES = 256
"""Lines of each of stdout and stderr an ``exec`` (and of the tail a ``run_tests``) returns by default."""

MAX_EXEC_STREAM_BYTES = 1_048_576
"""Largest per-stream byte cap an ``exec`` or ``run_tests`` may ask for (1 MiB)."""

MAX_EXEC_OUTPUT_LINES = 20_000
"""Largest per-stream line cap an ``exec`` or ``run_tests`` may ask for."""

MAX_REPLY_PATHS = 100_000
"""Most paths a workspace reply may list (changed files of a diff, files of a patch)."""

MAX_SNAPSHOT_BYTES = 64 * 1_048_576
"""Largest snapshot archive (gzip'd tar) the daemon makes or accepts (64 MiB)."""

MAX_MANIFEST_CONTENT_BYTES = 16 * 1_048_576
"""Most file content one ``workspace_manifest`` reply carries (16 MiB, before base64)."""

MAX_TEST_REPORT_BYTES = 8 * 1_048_576
"""Largest test report (JUnit XML) a ``clean_room`` reply carries (8 MiB)."""
