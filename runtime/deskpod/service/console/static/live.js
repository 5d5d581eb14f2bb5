// deskpod console: the live view of a sandbox.
//
// Mounts on every <canvas data-live-session="SESSION"> of the page (its width and
// height attributes are the sandbox's screen in pixels), opens the websocket
// /console/live/SESSION on this page's origin (the session cookie goes with it, and the
// page secret as a subprotocol when secret.js is loaded: the console's) and
// draws what the controller pushes: binary messages are JPEG frames, decoded with
// createImageBitmap and drawn with drawImage; {"type": "pointer"} moves the pointer
// drawn over the last frame; {"type": "meta"} (url, state, screen, stream) is fired
// on the canvas as the DOM event "deskpod-live-meta" (detail: the meta), for the page
// to show as text. After each frame drawn the canvas fires "deskpod-live-frame"
// (detail: {frames}) and its data-live-frames attribute counts the frames drawn.
//
// No inline script, no eval, no HTML built from strings: CSP-safe under
// script-src 'self'. Nothing from the sandbox is ever inserted as markup.
"use strict";

(function () {
  const POINTER = [[0, 0], [0, 17], [4, 13], [7, 20], [10, 19], [7, 12], [12, 12]];
  const RETRY_MIN_MS = 250;
  const RETRY_MAX_MS = 5000;

  function liveUrl(session) {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + "/console/live/" + encodeURIComponent(session);
  }

  function drawPointer(ctx, x, y) {
    ctx.save();
    ctx.beginPath();
    POINTER.forEach(function (p, i) {
      if (i === 0) { ctx.moveTo(x + p[0], y + p[1]); } else { ctx.lineTo(x + p[0], y + p[1]); }
    });
    ctx.closePath();
    ctx.fillStyle = "#ffffff";
    ctx.strokeStyle = "#000000";
    ctx.lineWidth = 1;
    ctx.fill();
    ctx.stroke();
    ctx.restore();
  }

  function mount(canvas) {
    if (canvas.dataset.liveMounted === "1") { return; }
    canvas.dataset.liveMounted = "1";
    const session = canvas.dataset.liveSession;
    const ctx = canvas.getContext("2d");
    let bitmap = null;       // the last frame drawn
    let pending = null;      // the newest frame not yet decoded (older ones are dropped)
    let decoding = false;
    let pointer = null;
    let scheduled = false;
    let frames = 0;
    let retryMs = RETRY_MIN_MS;
    let ended = false;

    function paint() {
      scheduled = false;
      if (bitmap !== null) {
        ctx.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
      }
      if (pointer !== null) {
        const sx = bitmap !== null ? canvas.width / bitmap.width : 1;
        const sy = bitmap !== null ? canvas.height / bitmap.height : 1;
        drawPointer(ctx, pointer.x * sx, pointer.y * sy);
      }
    }

    function schedule() {
      if (!scheduled) {
        scheduled = true;
        window.requestAnimationFrame(paint);
      }
    }

    function decodeNext() {
      if (decoding || pending === null) { return; }
      const blob = pending;
      pending = null;
      decoding = true;
      createImageBitmap(blob).then(function (decoded) {
        if (bitmap !== null) { bitmap.close(); }
        bitmap = decoded;
        frames += 1;
        // Drawn at once (not on the next animation frame): the frame is on the canvas
        // when the event fires.
        paint();
        canvas.dataset.liveFrames = String(frames);
        canvas.dispatchEvent(new CustomEvent("deskpod-live-frame", { detail: { frames: frames } }));
      }).catch(function () {
        // A frame the browser cannot decode is skipped; the next one replaces it.
      }).finally(function () {
        decoding = false;
        decodeNext();
      });
    }

    function onMessage(event) {
      if (typeof event.data !== "string") {
        pending = event.data;   // a Blob (binaryType "blob"): the newest replaces the undecoded one
        decodeNext();
        return;
      }
      let message;
      try {
        message = JSON.parse(event.data);
      } catch (err) {
        return;
      }
      if (message === null || typeof message !== "object") { return; }
      if (message.type === "pointer" && Number.isFinite(message.x) && Number.isFinite(message.y)) {
        pointer = { x: message.x, y: message.y };
        schedule();
      } else if (message.type === "meta") {
        const detail = {
          url: typeof message.url === "string" ? message.url : null,
          state: typeof message.state === "string" ? message.state : null,
          stream: typeof message.stream === "string" ? message.stream : null,
          screen: message.screen && typeof message.screen === "object" ? {
            width: Number(message.screen.width), height: Number(message.screen.height)
          } : null
        };
        if (detail.stream === "ended") { ended = true; }
        canvas.dataset.liveStream = detail.stream || "";
        canvas.dispatchEvent(new CustomEvent("deskpod-live-meta", { detail: detail }));
      }
    }

    function connect() {
      const secret = window.deskpodPageSecret;
      const ws = new WebSocket(liveUrl(session), secret ? secret.protocols() : []);
      ws.binaryType = "blob";
      ws.addEventListener("open", function () { retryMs = RETRY_MIN_MS; });
      ws.addEventListener("message", onMessage);
      ws.addEventListener("close", function () {
        if (ended || !canvas.isConnected) { return; }
        window.setTimeout(connect, retryMs);
        retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
      });
    }

    connect();
  }

  function mountAll() {
    document.querySelectorAll("canvas[data-live-session]").forEach(mount);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", mountAll);
  } else {
    mountAll();
  }
  // Canvases the console adds later (a session that starts) mount too.
  new MutationObserver(mountAll).observe(document.documentElement, { childList: true, subtree: true });
}());
