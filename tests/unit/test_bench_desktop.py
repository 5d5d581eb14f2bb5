"""``python -m bench desktop``'s pure parts: what the desktop image adds on disk, the memory
``docker stats`` shows, the daemon's reset phases read from its log, and the report's medians."""

from __future__ import annotations

from bench.common import memory_bytes
from bench.desktop import Round, desktop_added_bytes, report, reset_phases

BASE = {"Size": 100, "RootFS": {"Layers": ["sha256:base"]}}


def test_the_desktop_image_adds_its_size_less_the_base_it_shares() -> None:
    desktop = {"Size": 350, "RootFS": {"Layers": ["sha256:base", "sha256:apps", "sha256:venv"]}}
    assert desktop_added_bytes(desktop, BASE) == 250
    other = {"Size": 350, "RootFS": {"Layers": ["sha256:other", "sha256:apps"]}}
    assert desktop_added_bytes(other, BASE) == 350  # built on another base: nothing shared
    assert desktop_added_bytes(desktop, None) == 350


def test_memory_is_the_usage_less_the_page_cache_as_docker_stats_shows_it() -> None:
    v1 = {"memory_stats": {"usage": 1000, "stats": {"total_inactive_file": 300, "cache": 500}}}
    v2 = {"memory_stats": {"usage": 1000, "stats": {"inactive_file": 200}}}
    assert memory_bytes(v1) == 700 and memory_bytes(v2) == 800 and memory_bytes({}) == 0


def test_the_last_resets_phases_are_read_from_the_daemons_log() -> None:
    log = ("2026-12-07 11:27:01,256 INFO deskpod.agentd.daemon: reset done (6.499 s: stop 0.005, workspace 5.033, "
           "wipe 0.004, desktop 1.177, observe 0.281; new desktop)\n"
           "2026-12-07 11:27:08,090 INFO deskpod.agentd.daemon: reset done (1.798 s: stop 0.009, workspace 0.018, "
           "wipe 0.011, desktop 1.438, observe 0.321; standby swapped in)\n")
    assert reset_phases(log) == {"stop": 0.009, "workspace": 0.018, "wipe": 0.011, "desktop": 1.438, "observe": 0.321}
    assert reset_phases("no reset here") == {}


def test_the_report_gives_medians_and_leaves_what_a_stack_has_not_empty() -> None:
    mib = 2**20
    browser = [Round(healthy_s=s, reset_idle_s=r, runners_idle_s=r - 1, memory_idle={"sandbox": m * mib,
                                                                                    "egress": 10 * mib})
               for s, r, m in ((10.0, 2.0, 300), (12.0, 9.0, 320), (11.0, 3.0, 310))]
    desktop = [Round(healthy_s=13.0, runner_s=14.0, window_s=0.5, reset_idle_s=2.5, reset_apps_s=3.5,
                     runners_idle_s=0.1, runners_apps_s=None,
                     memory_idle={"sandbox": 300 * mib, "desktop": 40 * mib},
                     memory_apps={"sandbox": 310 * mib, "desktop": 90 * mib})]
    lines = report({"sandbox": 1_300_000_000, "desktop": 300_000_000, "desktop_added": 200_000_000},
                   {"browser-only": browser, "desktop": desktop})
    assert "| desktop profile: sandbox + what the desktop image adds beside it | 1500.0 |" in lines
    assert "| browser-only | 3 | 11.00 | — | — |" in lines and "| desktop | 1 | 13.00 | 14.00 | 0.50 |" in lines
    assert "| browser-only, no app open | 3 | 3.00 | 2.00 | 9.00 |" in lines
    assert "| desktop, no app open | 1 | 2.50 | 0.10 | 2.50 |" in lines
    assert "| desktop, terminal + editor open | 1 | 3.50 | — | 3.50 |" in lines  # its phase not logged
    assert not [line for line in lines if line.startswith("| browser-only, terminal")]
    assert "| browser-only, idle | 310 | — | 10 | — | 320 |" in lines
    assert "| desktop, idle | 300 | — | — | 40 | 340 |" in lines
    assert "| desktop, terminal + editor open | 310 | — | — | 90 | 400 |" in lines
