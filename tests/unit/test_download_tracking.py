"""The daemon's download tracking (pure: DevTools events in, observation entries out)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from deskpod.agentd.browser.downloads import Downloads, DownloadsFolder, safe_name
from deskpod.errors import DeskpodError
from deskpod.protocol import Download, ListDirRequest, Observation, ReadFileRequest, WriteFileRequest


def begin(d: Downloads, guid: str, name: str = "report.txt", url: str = "http://demo.test/r") -> None:
    d.on_event("Browser.downloadWillBegin", {"guid": guid, "url": url, "suggestedFilename": name, "frameId": "F"})


def progress(d: Downloads, guid: str, received: int, total: int, state: str = "inProgress") -> None:
    d.on_event("Browser.downloadProgress", {"guid": guid, "receivedBytes": received, "totalBytes": total,
                                            "state": state})


def tracker(tmp_path: Path, permitted: bool = True) -> Downloads:
    d = Downloads(tmp_path / "downloads")
    d.prepare()
    d.permitted = permitted
    return d


def test_behaviour_denies_unless_permitted(tmp_path: Path) -> None:
    d = tracker(tmp_path, permitted=False)
    assert d.behavior() == {"behavior": "deny", "downloadPath": str(tmp_path / "downloads"), "eventsEnabled": True}
    d.permitted = True
    assert d.behavior()["behavior"] == "allowAndName"


def test_a_download_beginning_without_permission_is_blocked(tmp_path: Path) -> None:
    d = tracker(tmp_path, permitted=False)
    begin(d, "g1")
    progress(d, "g1", 0, 30, "canceled")
    [item] = d.take()
    assert (item.state, item.reason, item.path) == ("blocked", "not_permitted", None)


def test_progress_then_complete_only_with_the_whole_file(tmp_path: Path) -> None:
    d = tracker(tmp_path)
    begin(d, "g1")
    progress(d, "g1", 10, 40)
    [item] = d.take()
    assert (item.state, item.received_bytes, item.total_bytes, item.progress) == ("in_progress", 10, 40, 0.25)
    # Still in progress: reported again though nothing changed.
    assert [i.state for i in d.take()] == ["in_progress"]
    (d.folder / "g1").write_bytes(b"x" * 10)  # partial file, browser claims complete at 40
    progress(d, "g1", 40, 40, "completed")
    [item] = d.take()
    assert (item.state, item.reason, item.path) == ("failed", "file_missing", None)


def test_a_complete_download_gets_its_safe_name_without_overwriting(tmp_path: Path) -> None:
    d = tracker(tmp_path)
    (d.folder / "report.txt").write_text("older")
    begin(d, "g2", name="report.txt")
    (d.folder / "g2").write_bytes(b"abc")
    progress(d, "g2", 3, 3, "completed")
    [item] = d.take()
    assert item.state == "complete" and item.progress == 1.0, item
    assert item.name == "report (1).txt" and item.path == str(d.folder / "report (1).txt")
    assert (d.folder / "report.txt").read_text() == "older"
    assert (d.folder / "report (1).txt").read_bytes() == b"abc" and not (d.folder / "g2").exists()
    assert d.take() == []  # finished, unchanged: not reported again


def test_canceled_is_failed(tmp_path: Path) -> None:
    d = tracker(tmp_path)
    begin(d, "g3")
    progress(d, "g3", 5, 0, "canceled")
    [item] = d.take()
    assert (item.state, item.reason, item.total_bytes, item.progress) == ("failed", "canceled", None, None)


def test_page_chosen_names_and_urls_are_made_safe(tmp_path: Path) -> None:
    assert safe_name("../../etc/passwd") == "_.._etc_passwd"
    assert safe_name(".bashrc") == "bashrc"
    assert safe_name("a\x00b\nc\\d") == "a_b_c_d"
    assert safe_name("...") == "download"
    assert len(safe_name("é" * 400).encode()) <= 255
    d = tracker(tmp_path)
    begin(d, "g4", name="/x/../y", url="http://demo.test/\x1b[31m")
    [item] = d.take()
    assert item.name == "_x_.._y" and item.url == "http://demo.test/%1B[31m"
    Download.model_validate(item.model_dump())


def test_malformed_events_are_ignored(tmp_path: Path) -> None:
    d = tracker(tmp_path)
    d.on_event("Browser.downloadWillBegin", {"guid": "../../x", "url": "u", "suggestedFilename": "n"})
    d.on_event("Browser.downloadProgress", {"guid": "unknown", "receivedBytes": 1, "totalBytes": 1,
                                            "state": "completed"})
    begin(d, "g5")
    d.on_event("Browser.downloadProgress", {"guid": "g5", "receivedBytes": "lots", "totalBytes": -4.0})
    [item] = d.take()
    assert (item.received_bytes, item.total_bytes) == (0, None)


def test_an_observation_carries_at_most_the_newest_downloads(tmp_path: Path) -> None:
    d = tracker(tmp_path)
    for i in range(40):
        begin(d, f"g{i}", name=f"f{i}")
    items = d.take()
    assert [i.name for i in items] == [f"f{i}" for i in range(8, 40)]
    Observation(downloads=items)


def test_the_downloads_folder_is_readable_by_the_file_tools_and_only_it(tmp_path: Path) -> None:
    folder = DownloadsFolder(tmp_path / "downloads", tmp_path / "state")
    (tmp_path / "downloads").mkdir()
    (tmp_path / "downloads" / "report.txt").write_text("the report\n")
    (tmp_path / "secret").write_text("not yours\n")
    (tmp_path / "downloads" / "link").symlink_to(tmp_path / "secret")
    root = str(tmp_path / "downloads")

    def read(path: str) -> ReadFileRequest:
        return ReadFileRequest(type="read_file", id="r", path=path)

    assert folder.handles(read(f"{root}/report.txt")) and folder.handles(ListDirRequest(type="list_dir", id="l",
                                                                                           path=root + "/"))
    assert not folder.handles(read("report.txt")) and not folder.handles(read(root + "x/report.txt"))
    assert not folder.handles(WriteFileRequest(type="write_file", id="w", path=f"{root}/x", content="x"))
    assert asyncio.run(folder.serve(read(f"{root}/report.txt"))).content == "the report\n"
    listing = asyncio.run(folder.serve(ListDirRequest(type="list_dir", id="l", path=root)))
    assert sorted(e.name for e in listing.entries) == ["link", "report.txt"]
    for escape in (f"{root}/../secret", f"{root}/link"):
        with pytest.raises(DeskpodError):
            asyncio.run(folder.serve(read(escape)))


def paused(d: Downloads, request_id: str, url: str, kind: str = "Document", redirected_from: str | None = None) -> None:
    params = {"requestId": request_id, "request": {"url": url}, "resourceType": kind}
    if redirected_from is not None:
        params["redirectedRequestId"] = redirected_from
    d.on_request(params)


def test_a_download_sent_without_permission_is_refused_inside_a_permitted_window(tmp_path: Path) -> None:
    """An agent's unpermitted click on a slow download, then a permitted action: the
    download begins while downloads are permitted, but its request was sent without."""
    d = tracker(tmp_path, permitted=False)
    paused(d, "job-1.0", "http://demo.test/download?name=late.txt&ms=600")
    d.permitted = True
    begin(d, "g1", "late.txt", url="http://demo.test/download?name=late.txt&ms=600")
    assert d.take_cancels() == ["g1"] and d.take_cancels() == []
    # The browser finished it before the cancel arrived: the file goes, nothing is named.
    (d.folder / "g1").write_bytes(b"x" * 10)
    progress(d, "g1", 10, 10, state="completed")
    [item] = d.take()
    assert (item.state, item.reason, item.path) == ("blocked", "not_permitted", None)
    assert list(d.folder.iterdir()) == []


def test_a_redirect_hop_keeps_its_first_hops_mark(tmp_path: Path) -> None:
    d = tracker(tmp_path, permitted=False)
    paused(d, "job-1.0", "http://demo.test/redirect?to=/download")
    d.permitted = True
    paused(d, "job-1.1", "http://demo.test/download?name=r.txt", redirected_from="job-1.0")
    begin(d, "g1", "r.txt", url="http://demo.test/download?name=r.txt")
    assert d.take()[0].state == "blocked" and d.take_cancels() == ["g1"]


def test_a_download_sent_with_permission_runs_and_others_are_not_marked(tmp_path: Path) -> None:
    d = tracker(tmp_path, permitted=True)
    paused(d, "job-2.0", "http://demo.test/download?name=ok.txt")
    paused(d, "job-3.0", "http://demo.test/download?name=img.txt", kind="Image")  # not a document: no mark
    begin(d, "g2", "ok.txt", url="http://demo.test/download?name=ok.txt")
    # Never paused (no allowlist in force, or a blob: URL): the permission in force decides.
    begin(d, "g3", "blob.txt", url="blob:http://demo.test/1234")
    assert [(i.id, i.state) for i in d.take()] == [("g2", "in_progress"), ("g3", "in_progress")]
    assert d.take_cancels() == []


def test_the_mark_is_found_through_a_fragment_and_a_long_url_shares_no_mark(tmp_path: Path) -> None:
    """``Fetch.requestPaused`` gives the URL without its fragment, the download event with
    it; two URLs alike in their first MAX_URL_CHARS characters are two requests."""
    d = tracker(tmp_path, permitted=False)
    d.marking = True
    paused(d, "job-1.0", "http://demo.test/download?name=f.txt&ms=600")
    long = "http://demo.test/download?name=l.txt&pad=" + "a" * 9000
    paused(d, "job-2.0", long + "1")
    d.permitted = True
    paused(d, "job-3.0", long + "2")  # the permitted request: a different URL
    begin(d, "g1", "f.txt", url="http://demo.test/download?name=f.txt&ms=600#frag")
    begin(d, "g2", "l.txt", url=long + "1")
    assert [(i.id, i.state) for i in d.take()] == [("g1", "blocked"), ("g2", "blocked")]
    assert d.take_cancels() == ["g1", "g2"]


def test_while_requests_are_marked_an_unseen_http_download_is_refused(tmp_path: Path) -> None:
    """Its mark was forgotten, or its request never paused: refused (fail closed); a
    ``blob:`` URL never goes to the network and keeps the permission in force."""
    d = tracker(tmp_path, permitted=True)
    d.marking = True
    begin(d, "g1", "x.txt", url="http://demo.test/download?name=x.txt")
    begin(d, "g2", "notes.txt", url="blob:http://demo.test/1234")
    assert [(i.id, i.state) for i in d.take()] == [("g1", "blocked"), ("g2", "in_progress")]
    assert d.take_cancels() == ["g1"]
