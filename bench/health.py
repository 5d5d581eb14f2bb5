"""What one run of the workspace container's health check costs, beside what it loaded before.

Docker runs the workspace's health check every 5 s in every sandbox. It was ``python -m
deskpod.agentd.runner --ping``, which loads the runner and with it every protocol model
(pydantic); it is now ``python -m deskpod.agentd.runner_health``, which speaks the
runner's ping with the standard library only. Both run ``--rounds`` times inside the
sandbox image (``docker run``, nothing else running, no runner to answer: the cost
measured is the interpreter's start and the imports, which is nearly all of it); the
baseline is ``python -c "import deskpod.agentd.runner"``, the import the old check paid
before it sent its ping. Each row gives the CPU time (user + system) of one run, from
``getrusage(RUSAGE_CHILDREN)``, and the CPU share of one core it takes at one run every 5 s.

``python -m bench health [--rounds 20]``. Needs Docker and the sandbox image
(``scripts/compose.sh build``). Prints Markdown for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess

from bench.common import image

INTERVAL_S = 5.0
"""The health check's interval in compose.yaml and the backends, seconds."""

_PROBE = """
import json, resource, subprocess, sys
def cost(argv, rounds):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(rounds):
        subprocess.run(argv, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)) / rounds
rounds = int(sys.argv[1])
print(json.dumps({
    "baseline": cost([sys.executable, "-c", "import deskpod.agentd.runner"], rounds),
    "now": cost([sys.executable, "-m", "deskpod.agentd.runner_health"], rounds),
}))
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rounds``: runs of each command."""
    parser.add_argument("--rounds", type=int, default=20)


def run(args: argparse.Namespace) -> None:
    """Measure both in the sandbox image and print the table."""
    done = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image("sandbox"), "-c", _PROBE,
                           str(args.rounds)], capture_output=True, text=True, check=True, timeout=600)
    costs = json.loads(done.stdout)
    print(f"| workspace health check ({args.rounds} runs each, sandbox image) | CPU per run | share of a core at one run per {INTERVAL_S:g} s |")
    print("|---|---|---|")
    for label, key in (("baseline: the runner's imports (what `runner --ping` loaded)", "baseline"),
                       ("`python -m deskpod.agentd.runner_health`", "now")):
        print(f"| {label} | {costs[key]:.3f} s | {100 * costs[key] / INTERVAL_S:.1f}% |")
