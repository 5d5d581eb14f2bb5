"""The daemon's side of Chromium, over the Chrome DevTools Protocol.

The connection: :mod:`.cdp_pipe` (one message off the pipe), :mod:`.devtools` (commands
and their replies), :mod:`.targets` (tabs, the active page's session, where each event
goes), :mod:`.activity` (requests and navigations in progress) and :mod:`.page_logs` (the
active tab's console messages and requests, bounded). What is done in a
page: :mod:`.cdp` (the DevTools client's page actions), :mod:`.frame_calls` and
:mod:`.frames` (pages through frames and shadow roots), :mod:`.axtree` (accessibility
summaries), :mod:`.elements` (element refs), :mod:`.dialogs` (JavaScript dialogs),
:mod:`.tab_keys` (tab-switching keys and the tab in front beside a dialog),
:mod:`.fasttype` (long text as one insertion), :mod:`.text_sources` (readable text
beyond ``innerText``), :mod:`.press_guard` (the judged control held to the press itself),
:mod:`.pdf_viewer` (whether the browser's PDF viewer has its document yet). Around it: :mod:`.chromium` (its command line),
:mod:`.request_filter` (the run's egress allowlist in the browser), :mod:`.downloads`
and :mod:`.download_gate` (downloads and their permission), :mod:`.file_chooser`
(``set_files``), :mod:`.snapshot` (browser snapshots) and :mod:`.trusted_ca` (operator
CA certificates).
"""

__all__: list[str] = []
