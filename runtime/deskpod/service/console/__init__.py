"""The web console of ``deskpod serve``.

Modules: :mod:`.app` (the console's pages and websocket), :mod:`.auth` (who may use it),
:mod:`.live_view` (the live view), :mod:`.timeline` (an audit folder's runs read as
timelines), :mod:`.replay_html` (the templates and the self-contained export),
:mod:`.history` (the history routes). Import the modules themselves: this package
imports nothing eagerly, so that FastAPI is loaded only by a service that serves the
console.
"""

__all__: list[str] = []
