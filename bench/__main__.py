"""deskpod benchmarks, run by hand from the repository root (package installed).

    python -m bench latency [--rounds 40] [--delay-rounds 5]   # action → screenshot vs the demo baseline
    python -m bench startup [--rounds 20] [--cold-rounds 5]    # cold start (vs --baseline-image), round trip vs per-action connection
    python -m bench reset [--rounds 50]                        # reset-to-ready, in place vs recreate vs restore
    python -m bench density [--size 10] [--drive-s 15]         # a pool of N: fill, memory, first observation, actions/s
    python -m bench policy [--rounds 20000]                    # policy checks per action vs validation alone
    python -m bench injection [--rounds 5] [--baseline PATH]   # injection scan: detection, false pauses, time per page
    python -m bench verdict [--rounds 10]                      # finish → verdict: clean room vs in-place check
    python -m bench egress [--rounds 20000] [--sandbox URL]    # request interception vs none
    python -m bench typing [--rounds 5] [--baseline-rounds 2]  # 5,000 characters: insertion vs key by key
    python -m bench live [--seconds 10] [--viewers 1,3]        # live view vs noVNC over x11vnc
    python -m bench recording [--seconds 30]                   # a run's recording: CPU and bytes per minute vs none
    python -m bench eval [--parallel 1,2,4]                    # the regression suite's wall time by --parallel
    python -m bench huge --baseline-image IMAGE [--rounds 5]   # a huge page: navigate time, reply bytes vs IMAGE
    python -m bench frame-clock [--rates 60,240]               # a page's frames/s and the CPU they cost, by refresh rate
    python -m bench swap [--tries 100] [--periods 2,0]         # a control swapped between check and press, guard on/off
    python -m bench structure [--baseline PATH]                # module sizes, largest class, import cycles, exports, README
    python -m bench health [--rounds 20]                       # the workspace health check's CPU per run vs the runner's imports
    python -m bench keys --baseline-image IMAGE [--rounds 100] # reading a page's key facts per observation vs an image without
    python -m bench webgl --baseline-image IMAGE               # Chromium's CPU and memory with WebGL on llvmpipe vs without
    python -m bench tabs --baseline-image IMAGE [--rounds 20]  # a click that opens a tab vs one that does not, vs an image before
    python -m bench fonts [--rounds 10]                        # the image's size by layer; pages in 31 scripts vs without Noto core
    python -m bench pdf --baseline-image IMAGE [--rounds 10]   # replies that load a PDF, and an ordinary page, vs an image before
    python -m bench popups --baseline-image IMAGE [--rounds 15] # clicks that open a select's list, a picker, a menu, vs an image before
    python -m bench desktop [--rounds 3] [--settle-s 5]        # the desktop profile's image, cold start, reset, memory vs browser-only

``python -m bench [--rounds N]`` without a subcommand runs ``startup`` (the issue-2
command). Each prints Markdown for BENCHMARKS.md on stdout (progress on stderr)
and tears down the compose project (or, for ``reset``, the containers) it started,
also on failure.
"""

from __future__ import annotations

import argparse
import sys

from bench import (
    density, desktop, egress, eval_suite, fonts, frame_clock, health, huge_page, injection, key_facts, latency, live,
    pdf, policy, popups, recording, reset, startup, structure, swap, tabs, typing_speed, verdict, webgl,
)

COMMANDS = {
    "latency": (latency, "click/type → screenshot, deskpod vs xdotool + scrot + convert, same container"),
    "startup": (startup, "cold start to first screenshot; click + screenshot vs a new connection per action"),
    "reset": (reset, "reset-to-ready p50/p95, in place vs container recreate vs snapshot restore"),
    "policy": (policy, "the controller's policy checks per action, beside protocol validation alone"),
    "injection": (injection, "the injection scan's detection and false pauses by corpus, and its time per page"),
    "verdict": (verdict, "time from finish to verdict, clean room beside the in-place check it replaced"),
    "density": (density, "a pool of N: time to fill, memory per slot, acquire → observation, actions/s at once"),
    "typing": (typing_speed, "5,000 characters typed: one insertion per long run beside key-by-key XTEST"),
    "egress": (egress, "the browser's request interception per request and per page load, beside none"),
    "eval": (eval_suite, "the shipped regression suite's wall time with deskpod eval at --parallel 1, 2 and 4"),
    "live": (live, "live view frame rate, glass-to-glass latency and CPU per viewer, beside noVNC over x11vnc"),
    "recording": (recording, "a run's screen recording: controller and sandbox CPU and MP4 bytes per minute of run, "
                             "beside the same run not recorded"),
    "frame-clock": (frame_clock, "a page's animation frames/s and the sandbox's CPU, idle and animated, by refresh rate"),
    "health": (health, "the workspace health check's CPU per run, beside the runner's imports it used to load"),
    "huge": (huge_page, "replies and navigate time on a huge page, beside an image without the content budget"),
    "keys": (key_facts, "an observation's time reading the page's key shortcuts and listeners, beside an image without"),
    "webgl": (webgl, "Chromium's CPU and memory idle, on a page and on a WebGL page, and the click round trip, "
                     "beside an image without WebGL"),
    "swap": (swap, "a control swapped on a fast timer between the daemon's check and the press, guard on and off"),
    "tabs": (tabs, "a click that opens a tab beside one that does not, beside a sandbox image from before"),
    "fonts": (fonts, "the sandbox image's size by layer (fonts, Mesa), and Chromium's CPU and memory on pages in "
                     "31 scripts and in Latin, beside the image without Debian's Noto core fonts"),
    "pdf": (pdf, "replies that load a PDF (navigate, slow, a link's click, in a frame) and an ordinary page, "
                 "beside a sandbox image from before"),
    "popups": (popups, "clicks that open a select's list, a colour picker and a context menu beside one that does "
                       "not, beside a sandbox image from before"),
    "desktop": (desktop, "the desktop profile beside the browser-only one: image size, cold start to healthy and to "
                         "an application's window, reset with and without applications open, memory per sandbox"),
    "structure": (structure, "the package's shape beside a baseline tree: module sizes, classes, import cycles, exports"),
}


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in COMMANDS and argv[0] not in ("-h", "--help")):
        argv.insert(0, "startup")
    parser = argparse.ArgumentParser(prog="python -m bench", description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=help_text, description=(module.__doc__ or "").split("\n\n")[0]))
    args = parser.parse_args(argv)
    COMMANDS[args.command][0].run(args)


if __name__ == "__main__":
    main()
