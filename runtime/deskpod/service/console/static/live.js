// deskpod console: the live view of a sandbox.
//
// Mounts on every <canvas data-live-session="SESSION"> of the page (its width and
// height attributes are the sandbox's screen in pixels), opens the websocket
// /console/live/SESSION on this page's origin (the session cookie goes with it, and the
// page secret as a subprotocol when secret.js is loaded: the console's) and
// draws what the controller pushes. Where WebCodecs can decode H.264 (a secure context:
// https, or http on a loopback address) the view asks for video (?video=avc1):
// {"type": "video"} configures a VideoDecoder and binary messages are H.264 chunks (a
// flags byte, bit 0 a key frame; an 8-byte big-endian timestamp in microseconds; the
// access unit, Annex B); each decoded VideoFrame is drawn with drawImage. Elsewhere, or
// when the canvas has data-live-video="off", or when the decoder fails, binary messages
// are JPEG frames, decoded with createImageBitmap. The canvas's data-live-codec says
// which ("jpeg" or the codec string); data-live-skipped counts the video chunks skipped
// while the decoder was behind (the view then waits for the next key frame). {"type": "pointer"} moves the pointer
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
  // What the controller's encoder makes for a 1280x800 screen (constrained baseline,
  // level 3.2): the probe of whether this browser can decode the view as video.
  const VIDEO_PROBE = "avc1.42c020";
  const CODEC = /^avc1\.[0-9a-f]{6}$/;
  const VIDEO_HEADER_BYTES = 9;
  // Chunks the decoder may hold before the view skips to the next key frame.
  const MAX_DECODE_QUEUE = 3;

  function videoSupported(canvas) {
    if (canvas.dataset.liveVideo === "off" || !window.isSecureContext || typeof window.VideoDecoder !== "function") {
      return Promise.resolve(false);
    }
    return window.VideoDecoder.isConfigSupported({ codec: VIDEO_PROBE, optimizeForLatency: true })
      .then(function (answer) { return answer.supported === true; })
      .catch(function () { return false; });
  }

  function liveUrl(session, video) {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + "/console/live/" + encodeURIComponent(session) +
      (video ? "?video=avc1" : "");
  }

  function widthOf(image) { return image.displayWidth || image.width; }
  function heightOf(image) { return image.displayHeight || image.height; }

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
    let video = false;       // the view asks for H.264
    let socket = null;
    let decoder = null;      // the VideoDecoder, once configured
    let configured = "";     // the configuration it has (codec, width, height)
    let waitingKey = true;   // delta chunks are skipped until a key frame
    let skipped = 0;         // delta chunks skipped (data-live-skipped)

    function paint() {
      scheduled = false;
      if (bitmap !== null) {
        ctx.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
      }
      if (pointer !== null) {
        const sx = bitmap !== null ? canvas.width / widthOf(bitmap) : 1;
        const sy = bitmap !== null ? canvas.height / heightOf(bitmap) : 1;
        drawPointer(ctx, pointer.x * sx, pointer.y * sy);
      }
    }

    function schedule() {
      if (!scheduled) {
        scheduled = true;
        window.requestAnimationFrame(paint);
      }
    }

    function show(decoded) {
      if (bitmap !== null) { bitmap.close(); }
      bitmap = decoded;
      frames += 1;
      // Drawn at once (not on the next animation frame): the frame is on the canvas
      // when the event fires.
      paint();
      canvas.dataset.liveFrames = String(frames);
      canvas.dispatchEvent(new CustomEvent("deskpod-live-frame", { detail: { frames: frames } }));
    }

    function fallBackToJpeg() {
      // The decoder failed: the view goes on as JPEG frames, on a new connection.
      video = false;
      canvas.dataset.liveCodec = "jpeg";
      if (decoder !== null && decoder.state !== "closed") { decoder.close(); }
      decoder = null;
      if (socket !== null) { socket.close(); }
    }

    function configure(message) {
      const width = Number(message.width);
      const height = Number(message.height);
      if (typeof message.codec !== "string" || !CODEC.test(message.codec) || !Number.isInteger(width) ||
          !Number.isInteger(height) || width < 2 || height < 2) { return; }
      const wanted = message.codec + " " + width + "x" + height;
      if (decoder !== null && decoder.state === "configured" && wanted === configured) { return; }
      if (decoder === null || decoder.state === "closed") {
        decoder = new window.VideoDecoder({ output: show, error: fallBackToJpeg });
      }
      try {
        decoder.configure({ codec: message.codec, codedWidth: width, codedHeight: height,
          optimizeForLatency: true });
      } catch (err) {
        fallBackToJpeg();
        return;
      }
      configured = wanted;
      waitingKey = true;
      canvas.dataset.liveCodec = message.codec;
    }

    function decodeChunk(buffer) {
      if (decoder === null || decoder.state !== "configured" || buffer.byteLength <= VIDEO_HEADER_BYTES) { return; }
      const view = new DataView(buffer);
      const key = (view.getUint8(0) & 1) === 1;
      if (!key && (waitingKey || decoder.decodeQueueSize > MAX_DECODE_QUEUE)) {
        waitingKey = true;   // behind (or not started): the next key frame catches up
        skipped += 1;
        canvas.dataset.liveSkipped = String(skipped);
        return;
      }
      waitingKey = false;
      decoder.decode(new window.EncodedVideoChunk({
        type: key ? "key" : "delta",
        timestamp: Number(view.getBigUint64(1)),
        data: new Uint8Array(buffer, VIDEO_HEADER_BYTES)
      }));
    }

    function decodeNext() {
      if (decoding || pending === null) { return; }
      const blob = pending;
      pending = null;
      decoding = true;
      createImageBitmap(blob).then(show).catch(function () {
        // A frame the browser cannot decode is skipped; the next one replaces it.
      }).finally(function () {
        decoding = false;
        decodeNext();
      });
    }

    function onMessage(event) {
      if (typeof event.data !== "string") {
        let data = event.data;  // a Blob (binaryType "blob") or an ArrayBuffer ("arraybuffer")
        if (data instanceof ArrayBuffer) {
          if (video && new Uint8Array(data, 0, 1)[0] !== 0xff) {
            decodeChunk(data);
            return;
          }
          // A JPEG (it starts with 0xFF; a chunk's flags byte never does): this controller
          // cannot encode video, and the view stays JPEG.
          video = false;
          canvas.dataset.liveCodec = "jpeg";
          data = new Blob([data], { type: "image/jpeg" });
        }
        pending = data;   // the newest replaces the undecoded one
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
      if (message.type === "video" && video) {
        configure(message);
      } else if (message.type === "pointer" && Number.isFinite(message.x) && Number.isFinite(message.y)) {
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
      const ws = new WebSocket(liveUrl(session, video), secret ? secret.protocols() : []);
      socket = ws;
      ws.binaryType = video ? "arraybuffer" : "blob";

      configured = "";
      ws.addEventListener("open", function () { retryMs = RETRY_MIN_MS; });
      ws.addEventListener("message", onMessage);
      ws.addEventListener("close", function () {
        if (ended || !canvas.isConnected) { return; }
        window.setTimeout(connect, retryMs);
        retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
      });
    }

    videoSupported(canvas).then(function (supported) {
      video = supported;
      canvas.dataset.liveCodec = video ? "" : "jpeg";
      connect();
    });
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
