"""Fonts for 30 scripts: the image's size by layer, and the CPU and memory of pages in many
scripts, beside the same image without Debian's Noto core fonts.

``python -m bench fonts [--rounds 10] [--passes 2] [--baseline-image IMAGE]`` (from the
repository root, package installed; this tree's images built, ``$DESKPOD_SANDBOX_IMAGE`` and
``$DESKPOD_DEMO_IMAGE``) measures, in one run:

- **image size**: the sandbox image's total and each of its layers (``image.history()``),
  the layers named by what they install: the Noto core fonts (``fonts-noto-core``), Mesa for
  WebGL (``libgl1-mesa-dri``), the fontconfig cache (``fc-cache``), the big package layer
  (Chromium, Xvfb, the CJK, emoji and DejaVu fonts); and the bytes of the files each font
  package and Mesa's GL packages put in the image (``dpkg -L``, regular files);
- **rendering**: in its own compose project (``-p deskpodfonts``: egress, demo, the
  hardened sandbox of compose.yaml), two pages loaded ``--rounds`` times each, Latin first:
  ``fonts-scripts?latin`` (31 lines of Latin letters) and ``fonts-scripts?text`` (a line of
  each of the 31 scripts' letters, same layout); then the ``fonts-scripts`` fixture's check
  once (how many of its 31 scripts are drawn as ``.notdef`` boxes or nothing). Per page:
  each ``navigate`` (settled, no screenshot) from the request sent to the reply parsed, the
  first apart (the first time this container's Chromium draws those letters); Chromium's CPU
  seconds (``utime + stime`` of every ``chromium`` process and of the children each reaped)
  and the container's (its cgroup's usage: the daemon, Xvfb and openbox too) over the first
  load, and per load over the others; the sum of Chromium's resident sets and the container's
  memory (cgroup usage) after them.

The baseline is, by default, this tree's sandbox image with ``fonts-noto-core`` purged and
fontconfig's cache built again (``IMAGE-without-noto-core``, built by this command): the
fonts the image had before the Noto core set (CJK, emoji, DejaVu), nothing else changed. With
``--baseline-image`` another image (e.g. one built from main before the fonts). The two take
turns ``--passes`` times (this tree, baseline, this tree, ...), each pass a row, so a change in
the machine's load shows between passes of one image. Prints Markdown for BENCHMARKS.md;
tears the project down, also on failure.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from typing import Any

import docker

from bench.common import (
    beside_baseline, chromium_sample, container_cpu_s, container_mib, image, ready_client, run_line, sandbox_container,
)
from deskpod.protocol import ObserveOptions

FIXTURE = "http://demo.test/fixtures/fonts-scripts"
SCRIPTS_PAGE = "31 scripts (a line each)"
PAGES = {"Latin only (31 lines)": f"{FIXTURE}?latin", SCRIPTS_PAGE: f"{FIXTURE}?text"}
"""The rendered pages, loaded in this order: the fixture's two text modes (same layout)."""
QUIET = ObserveOptions(screenshot=False)
LAYERS = (
    ("fonts-noto-core", "Noto core fonts (the other scripts of the 30)"),
    ("libgl1-mesa-dri", "Mesa for WebGL, named on its own"),
    ("fc-cache", "fontconfig's cache of every font"),
    ("fonts-noto-cjk", "packages: Chromium, Xvfb (with Mesa), CJK, emoji and DejaVu fonts, Python"),
)
"""Layers named by a word of the command that made them; the first match wins."""
MESA_PACKAGES = ("libgl1-mesa-dri", "libllvm15", "libz3-4", "libglx-mesa0", "libgl1", "libglx0", "libglapi-mesa")
"""Mesa's GL with llvmpipe and the libraries it pulls (LLVM and its Z3)."""
PACKAGE_BYTES = r"""
import json, os, stat, subprocess, sys
found = {}
for line in subprocess.run(["dpkg-query", "-W", "-f", "${db:Status-Abbrev}\t${Package}\n", *sys.argv[1:]],
                           capture_output=True, text=True).stdout.splitlines():
    status, package = line.split("\t")
    if not status.startswith("ii"):
        continue
    size, seen = 0, set()
    for path in subprocess.run(["dpkg", "-L", package], capture_output=True, text=True).stdout.splitlines():
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
            seen.add((info.st_dev, info.st_ino))
            size += info.st_size
    found[package] = size
print(json.dumps(found))
"""
"""Run with the image's Python, the packages' names or patterns as arguments: the bytes of the
regular files each installed package put in the image (``dpkg -L``; a file with several hard
links, as Mesa's drivers are, once; files dpkg was told not to unpack, such as docs, are absent
and not counted)."""


def layer_rows(history: list[dict[str, Any]]) -> list[tuple[str, int]]:
    """Bytes by layer kind from ``image.history()`` (each entry's ``CreatedBy`` and ``Size``, bytes).

    Returns:
        ``(name, bytes)``: the whole image first, then each :data:`LAYERS` kind found, in
        :data:`LAYERS` order, then "the base image" (layers with no command, as a local
        bootstrap base shows) and "every other layer"; kinds with no layer are left out.
    """
    sizes: dict[str, int] = {}
    for entry in history:
        command = str(entry.get("CreatedBy") or "")
        name = next((label for word, label in LAYERS if word in command),
                    "the base image" if not command else "every other layer")
        sizes[name] = sizes.get(name, 0) + int(entry.get("Size") or 0)
    order = [label for _, label in LAYERS] + ["the base image", "every other layer"]
    return [("the whole image", sum(sizes.values()))] + [(name, sizes[name]) for name in order if name in sizes]


def boxed_scripts(page_text: str) -> int:
    """How many scripts the ``fonts-scripts`` fixture found drawn as boxes or nothing, from its
    ``FONTS {json}`` line.

    Raises:
        ValueError: no such line, or one that is not the fixture's JSON.
    """
    line = next((line for line in page_text.splitlines() if line.startswith("FONTS {")), None)
    if line is None:
        raise ValueError("the page has no FONTS line")
    found = json.loads(line.removeprefix("FONTS "))
    if not isinstance(found, dict) or not isinstance(found.get("missing"), dict):
        raise ValueError(f"not the fixture's result: {line[:200]}")
    return len(found["missing"])


def package_bytes(dk: docker.DockerClient, sandbox: str) -> dict[str, int]:
    """The bytes of the files each installed ``fonts-*`` package and each of :data:`MESA_PACKAGES`
    put in ``sandbox`` (:data:`PACKAGE_BYTES`, in a throwaway container without network)."""
    out = dk.containers.run(sandbox, ["-c", PACKAGE_BYTES, "fonts-*", *MESA_PACKAGES], entrypoint="python3",
                            network_mode="none", remove=True)
    found: dict[str, int] = json.loads(out)
    return found


def without_noto_core(dk: docker.DockerClient, sandbox: str) -> str:
    """Build ``SANDBOX-without-noto-core``: ``sandbox`` with ``fonts-noto-core`` purged and
    fontconfig's cache built again in a layer of its own (as the Dockerfile does, so the cache's
    folder times match), the user put back. Returns its tag."""
    user = dk.images.get(sandbox).attrs["Config"].get("User") or "root"
    dockerfile = (f"FROM {sandbox}\nUSER root\nRUN dpkg --purge fonts-noto-core\nRUN fc-cache -f\nUSER {user}\n")
    tag = f"{sandbox}-without-noto-core" if ":" in sandbox.rsplit("/", 1)[-1] else f"{sandbox}:without-noto-core"
    dk.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return tag


def cpu_sample(container: Any) -> dict[str, float]:
    """:func:`~bench.common.chromium_sample` with the container's CPU seconds (``container_cpu_s``)."""
    return {**chromium_sample(container), "container_cpu_s": container_cpu_s(container)}


async def measure(url: str, token: str, container: Any, rounds: int) -> dict[str, Any]:
    """Each page's navigate times (s), Chromium's CPU per load (s) and memory (MiB), then the
    fixture's count of scripts drawn as boxes (last: its check draws every script's letters)."""
    client = await ready_client(url, token, "http://demo.test/")
    found: dict[str, Any] = {}
    try:
        for name, page in PAGES.items():
            samples, times = [cpu_sample(container)], []
            for _ in range(rounds):
                t0 = time.perf_counter()
                await client.navigate(page, QUIET)
                times.append(time.perf_counter() - t0)
                if len(times) == 1 or len(times) == rounds:
                    samples.append(cpu_sample(container))
            before, first, after = samples[0], samples[1], samples[-1]
            found[name] = {"times": times, "rss_mib": after["rss_mib"], "container_mib": container_mib(container),
                           **{f"first_{key}": first[key] - before[key] for key in ("cpu_s", "container_cpu_s")},
                           **{key: (after[key] - first[key]) / (rounds - 1) for key in ("cpu_s", "container_cpu_s")}}
            print(f"  {name} done", file=sys.stderr, flush=True)
        checked = await client.navigate(FIXTURE, ObserveOptions(screenshot=False, page_text=True))
        found["boxed"] = boxed_scripts(str(checked.page_text))
        shown = await client.navigate(PAGES[SCRIPTS_PAGE], ObserveOptions(screenshot=False, page_text=True))
        if "FONTS" in str(shown.page_text):
            raise SystemExit("the demo image's fixture has no text modes: build this tree's ($DESKPOD_DEMO_IMAGE)")
    finally:
        await client.close()
    return found


def report(layers: list[tuple[str, int]], packages: dict[str, int], rows: dict[str, dict[str, Any]], meta: str) -> str:
    whole = layers[0][1]
    lines = [meta, "", "| layers of the sandbox image | MB | share of the image |", "|---|---|---|"]
    lines += [f"| {name} | {size / 1e6:.1f} | {100 * size / whole:.1f} % |" for name, size in layers]
    lines += ["", "| package | files in the image (MB) |", "|---|---|"]
    lines += [f"| {name} | {size / 1e6:.1f} |" for name, size in sorted(packages.items(), key=lambda kv: -kv[1])]
    lines += ["", "| page | sandbox | scripts drawn as boxes | loads | first load: navigate (s) | Chromium CPU (s) "
              "| container CPU (s) | later loads: navigate p50 (s) | max (s) | Chromium CPU per load (s) | container CPU "
              "per load (s) | Chromium RSS, sum (MiB) | container memory (MiB) |", "|" + "---|" * 13]
    for page in PAGES:
        for system, found in rows.items():
            row = found[page]
            later = row["times"][1:]
            lines.append(f"| {page} | {system} | {found['boxed']} of 31 | {len(row['times'])} | {row['times'][0]:.3f} | "
                         f"{row['first_cpu_s']:.3f} | {row['first_container_cpu_s']:.3f} | "
                         f"{statistics.median(later):.3f} | {max(later):.3f} | {row['cpu_s']:.3f} | "
                         f"{row['container_cpu_s']:.3f} | {row['rss_mib']:.0f} | {row['container_mib']:.0f} |")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--baseline-image", help="a sandbox image to compare with (default: this tree's without "
                                                 "fonts-noto-core, built by this command)")
    parser.add_argument("--rounds", type=int, default=10, help="loads of each page per pass, at least 2 (default 10)")
    parser.add_argument("--passes", type=int, default=2, help="turns of the two images (default 2)")
    parser.add_argument("--project", default="deskpodfonts", help="compose project name (default deskpodfonts)")


def run(args: argparse.Namespace) -> None:
    if args.rounds < 2:
        raise SystemExit("--rounds must be at least 2: the first load is reported apart from the others")
    started, load_before = time.monotonic(), os.getloadavg()[0]
    dk = docker.from_env()
    sandbox = image("sandbox")
    layers = layer_rows(dk.images.get(sandbox).history())
    packages = package_bytes(dk, sandbox)
    rows = beside_baseline(args.project, args.baseline_image or without_noto_core(dk, sandbox),
                           lambda url, token: measure(url, token, sandbox_container(dk, args.project), args.rounds),
                           passes=args.passes)
    print(report(layers, packages, rows, f"{run_line('fonts', started)} Load average at the start {load_before:.2f}."))
