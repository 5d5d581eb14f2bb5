"""The baseline's timing loop, run INSIDE the bench sandbox container.

``python -m bench latency`` sends this file's source as ``python3 -c SOURCE CONFIG``
through ``docker exec`` (a fixed argv list, no shell), so the timings exclude the
docker-exec overhead. Standard library only. It does what common computer-use
demos do for one step (Anthropic's computer-use reference demo, for one):

1. input through an ``xdotool`` subprocess: ``xdotool mousemove X Y click 1`` or
   ``xdotool type --delay 12 -- TEXT`` (12 ms is the demos' and xdotool's default);
2. optionally their fixed delay (2 s) "for the screen to settle";
3. a screenshot-tool subprocess writing a PNG file: ``scrot -p -o FILE`` (the
   reference demo's fallback when gnome-screenshot is absent) or ImageMagick's
   ``import -window root FILE``;
4. an ImageMagick resize subprocess to the model's image size:
   ``convert FILE -resize WxH! OUT`` (``OUT`` is PNG, or JPEG with ``-quality``);
5. reading ``OUT`` and base64-encoding it for the model API.

CONFIG is JSON: ``{"action": "click"|"type", "points": [[x, y], ...] (click round i
uses point i modulo their number), "text", "rounds", "warmup",
"delay_s", "tool": "scrot"|"import", "size": [w, h], "format": "png"|"jpeg",
"quality", "check_stale"}``. Prints one JSON object: ``{"rounds": [{"total",
"action", "delay", "shot", "resize", "encode", "bytes", "sha256", "stale"}, ...]}``
with durations in milliseconds. ``sha256`` is of the screenshot tool's file (scrot
writes the same bytes for the same pixels; ``convert`` stamps dates into PNGs).
``stale`` (scrot only, outside the timings): a second ``scrot`` 0.1 s after the
round differs from the round's screenshot, i.e. the screen was still changing.
"""

import base64
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time


def run(argv):
    subprocess.run(argv, check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main():
    cfg = json.loads(sys.argv[1])
    if cfg["action"] == "click":
        actions = [["xdotool", "mousemove", str(x), str(y), "click", "1"] for x, y in cfg["points"]]
    else:
        actions = [["xdotool", "type", "--delay", "12", "--", cfg["text"]]]
    work = tempfile.mkdtemp(prefix="bench-")
    shot_path = os.path.join(work, "screenshot.png")
    check_path = os.path.join(work, "check.png")
    out_path = os.path.join(work, "out." + ("jpg" if cfg["format"] == "jpeg" else "png"))
    if cfg["tool"] == "scrot":
        shoot = ["scrot", "-p", "-o", shot_path]
    else:
        shoot = ["import", "-window", "root", shot_path]
    w, h = cfg["size"]
    resize = ["convert", shot_path, "-resize", f"{w}x{h}!"]
    if cfg["format"] == "jpeg":
        resize += ["-quality", str(cfg["quality"])]
    resize.append(out_path)
    rounds = []
    for i in range(cfg["warmup"] + cfg["rounds"]):
        t0 = time.perf_counter()
        run(actions[i % len(actions)])
        t1 = time.perf_counter()
        if cfg["delay_s"]:
            time.sleep(cfg["delay_s"])
        t2 = time.perf_counter()
        run(shoot)
        t3 = time.perf_counter()
        run(resize)
        t4 = time.perf_counter()
        with open(out_path, "rb") as f:
            data = f.read()
        encoded = base64.b64encode(data)
        t5 = time.perf_counter()
        if i < cfg["warmup"]:
            continue
        with open(shot_path, "rb") as f:
            shot_sha = hashlib.sha256(f.read()).hexdigest()
        stale = None
        if cfg["check_stale"] and cfg["tool"] == "scrot":
            time.sleep(0.1)
            run(["scrot", "-p", "-o", check_path])
            with open(check_path, "rb") as f:
                stale = hashlib.sha256(f.read()).hexdigest() != shot_sha
        rounds.append({
            "total": (t5 - t0) * 1000, "action": (t1 - t0) * 1000, "delay": (t2 - t1) * 1000,
            "shot": (t3 - t2) * 1000, "resize": (t4 - t3) * 1000, "encode": (t5 - t4) * 1000,
            "bytes": len(data), "sha256": shot_sha, "b64": len(encoded), "stale": stale,
        })
    for name in os.listdir(work):
        os.unlink(os.path.join(work, name))
    os.rmdir(work)
    print(json.dumps({"rounds": rounds}))


if __name__ == "__main__":
    main()
