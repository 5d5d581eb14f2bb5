// deskpod console: the page's one script (the Content-Security-Policy allows no inline script).
//
// It speaks the controller service's JSON messages over /console/ws (the same messages as
// /v1/controller). Every string that comes from a sandbox, a page or the service is put into
// the page with textContent or as an attribute value, never parsed as HTML.
"use strict";

(function () {
  const sessions = new Map();   // session id -> {view, card}
  const questions = new Map();  // request or pause id -> {kind, session, card, timer}
  let me = {name: "", role: "viewer"};
  let ws = null;
  let counter = 0;

  const $ = (root, selector) => root.querySelector(selector);
  const text = (node, value) => { node.textContent = value === null || value === undefined ? "" : String(value); };
  const nextId = (prefix) => `${prefix}-${Date.now().toString(36)}-${(counter++).toString(36)}`;

  function clone(id) {
    return document.getElementById(id).content.firstElementChild.cloneNode(true);
  }

  function status(message, bad) {
    const node = document.getElementById("status");
    text(node, message);
    node.classList.toggle("bad", Boolean(bad));
  }

  function send(message) {
    if (ws === null || ws.readyState !== WebSocket.OPEN) {
      status("not connected: the answer was not sent", true);
      return false;
    }
    ws.send(JSON.stringify(message));
    return true;
  }

  function refreshEmpty() {
    document.getElementById("no-questions").hidden = document.querySelector("#questions .question") !== null;
    document.getElementById("no-sessions").hidden = sessions.size > 0;
  }

  function applyRole(root) {
    for (const button of root.querySelectorAll(".approver-only")) {
      button.disabled = me.role !== "approver";
      if (me.role !== "approver") button.title = "only an approver may answer";
    }
  }

  function taskOf(session) {
    const known = sessions.get(session);
    return known ? known.view.task : session;
  }

  // ---- sessions --------------------------------------------------------------------------

  function upsertSession(view) {
    let entry = sessions.get(view.session);
    if (entry === undefined) {
      const card = clone("tpl-session");
      card.dataset.session = view.session;
      const canvas = $(card, "canvas.live");
      canvas.dataset.liveSession = view.session;
      canvas.width = view.screen.width;
      canvas.height = view.screen.height;
      canvas.setAttribute("aria-label", "live view of the sandbox");
      $(card, "button.takeover").addEventListener("click", () => {
        send({type: "takeover", id: nextId("takeover"), session: view.session});
      });
      $(card, "button.handback").addEventListener("click", () => {
        send({type: "handback", id: nextId("handback"), session: view.session});
      });
      bindTakeover(canvas, view.session);
      canvas.addEventListener("deskpod-live-meta", (event) => {
        const detail = event.detail || {};
        if (typeof detail.url === "string") text($(card, "a.url"), detail.url);
      });
      applyRole(card);
      document.getElementById("sessions").prepend(card);
      entry = {view, card, takeover: false};
      sessions.set(view.session, entry);
    }
    entry.view = view;
    const card = entry.card;
    text($(card, ".task"), view.task);
    text($(card, ".state"), view.state);
    card.dataset.state = view.state;
    text($(card, ".title"), view.title);
    const link = $(card, "a.url");
    text(link, view.url || view.start_url || "");
    const url = view.url || "";
    if (/^https?:\/\//i.test(url)) link.href = url; else link.removeAttribute("href");
    const over = ["succeeded", "failed", "cancelled", "ended"].includes(view.state);
    $(card, "button.takeover").hidden = over || entry.takeover;
    // A question is settled once its session's run is past it: the views and the
    // questions arrive in the order the run made them.
    for (const [id, question] of questions) {
      if (question.session !== view.session) continue;
      if ((question.kind === "confirm" && view.state !== "awaiting_confirmation")
          || (question.kind === "pause" && view.state !== "paused")
          || (question.kind === "credential" && over)) {
        dropQuestion(id);
      }
    }
    refreshEmpty();
  }

  function setTakeover(message) {
    const entry = sessions.get(message.session);
    if (entry === undefined) return;
    entry.takeover = Boolean(message.active);
    entry.takeoverBy = message.by || "";
    entry.card.classList.toggle("taken-over", entry.takeover);
    text($(entry.card, ".takeover-state"),
         entry.takeover ? `Taken over by ${entry.takeoverBy}: your pointer and keys on the screen drive the sandbox.` : "");
    $(entry.card, "button.handback").hidden = !entry.takeover;
    $(entry.card, "button.takeover").hidden = entry.takeover;
    if (entry.takeover && entry.takeoverBy === me.name) $(entry.card, "canvas.live").focus();
  }

  // ---- takeover input: pointer and keyboard on the live canvas -> human_input ----------

  function screenPoint(canvas, event) {
    const box = canvas.getBoundingClientRect();
    const x = Math.round((event.clientX - box.left) * canvas.width / Math.max(1, box.width));
    const y = Math.round((event.clientY - box.top) * canvas.height / Math.max(1, box.height));
    return {x: Math.min(Math.max(x, 0), canvas.width - 1), y: Math.min(Math.max(y, 0), canvas.height - 1)};
  }

  const NAMED_KEYS = new Set(["Enter", "Backspace", "Tab", "Escape", "Delete", "Home", "End", "PageUp", "PageDown",
    "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight", "Insert", "F1", "F2", "F3", "F4", "F5", "F6", "F7", "F8",
    "F9", "F10", "F11", "F12"]);

  function bindTakeover(canvas, session) {
    const active = () => {
      const entry = sessions.get(session);
      return entry !== undefined && entry.takeover && entry.takeoverBy === me.name;
    };
    const input = (action) => send({type: "human_input", id: nextId("input"), session, action});
    let down = null;
    canvas.addEventListener("mousedown", (event) => {
      if (!active()) return;
      event.preventDefault();
      canvas.focus();
      down = screenPoint(canvas, event);
    });
    canvas.addEventListener("mouseup", (event) => {
      if (!active() || down === null) return;
      event.preventDefault();
      const up = screenPoint(canvas, event);
      const button = ["left", "middle", "right"][event.button] || "left";
      if (Math.abs(up.x - down.x) + Math.abs(up.y - down.y) > 4) {
        input({type: "drag", path: [down, up]});
      } else if (event.detail === 2) {
        input({type: "double_click", x: up.x, y: up.y});
      } else if (event.detail === 1) {
        input({type: "click", x: up.x, y: up.y, button});
      }
      down = null;
    });
    canvas.addEventListener("contextmenu", (event) => { if (active()) event.preventDefault(); });
    canvas.addEventListener("wheel", (event) => {
      if (!active()) return;
      event.preventDefault();
      const point = screenPoint(canvas, event);
      const notches = (delta) => Math.max(-10, Math.min(10, Math.round(delta / 100) || Math.sign(delta)));
      input({type: "scroll", x: point.x, y: point.y, scroll_x: notches(event.deltaX), scroll_y: notches(event.deltaY)});
    }, {passive: false});
    canvas.addEventListener("keydown", (event) => {
      if (!active()) return;
      const chord = [];
      if (event.ctrlKey) chord.push("CTRL");
      if (event.altKey) chord.push("ALT");
      if (event.metaKey) chord.push("SUPER");
      if (event.key.length === 1 && chord.length === 0) {
        event.preventDefault();
        input({type: "type", text: event.key});
      } else if (NAMED_KEYS.has(event.key) || (event.key.length === 1 && chord.length > 0)) {
        event.preventDefault();
        if (event.shiftKey && event.key.length !== 1) chord.push("SHIFT");
        chord.push(event.key.length === 1 ? event.key.toLowerCase() : event.key.toUpperCase());
        input({type: "keypress", keys: chord});
      }
    });
  }

  // ---- questions ---------------------------------------------------------------------------

  function dropQuestion(id) {
    const question = questions.get(id);
    if (question === undefined) return;
    if (question.timer !== null) clearInterval(question.timer);
    const secret = question.card.querySelector("input.secret");
    if (secret !== null) secret.value = "";
    question.card.remove();
    questions.delete(id);
    refreshEmpty();
  }

  function countdown(card, id, timeoutS) {
    const node = $(card, ".countdown");
    const deadline = Date.now() + Math.max(0, Number(timeoutS) || 0) * 1000;
    const tick = () => {
      const left = Math.max(0, Math.ceil((deadline - Date.now()) / 1000));
      text(node, left > 0 ? `${left} s left` : "time is up");
      if (left === 0) {  // the service withdraws it and says why (question_withdrawn)
        for (const button of card.querySelectorAll(".actions button")) button.disabled = true;
        return false;
      }
      return true;
    };
    tick();
    return setInterval(() => { if (!tick()) { const q = questions.get(id); if (q) clearInterval(q.timer); } }, 1000);
  }

  function addQuestion(id, kind, session, card) {
    if (questions.has(id)) dropQuestion(id);
    card.dataset.id = id;
    card.dataset.session = session;
    applyRole(card);
    document.getElementById("questions").prepend(card);
    questions.set(id, {kind, session, card, timer: null});
    refreshEmpty();
    return questions.get(id);
  }

  const IMAGE_TYPES = {png: "image/png", jpeg: "image/jpeg", jpg: "image/jpeg", webp: "image/webp"};

  function showConfirmation(message) {
    const request = message.request || {};
    if (typeof request.id !== "string") return;
    // A new ask for the same session (its screen changed) replaces the old card.
    for (const [id, question] of questions) {
      if (question.kind === "confirm" && question.session === message.session) dropQuestion(id);
    }
    const card = clone("tpl-confirm");
    text($(card, ".task"), taskOf(message.session));
    text($(card, ".level"), request.level);
    text($(card, ".summary"), request.summary || request.command);
    const action = request.action || {};
    text($(card, ".action"), request.action ? JSON.stringify(action) : `${request.command || ""} (in ${request.cwd || ""})`);
    text($(card, ".data"), request.data === null || request.data === undefined ? "(none)" : request.data);
    text($(card, ".reversible"), request.reversible ? "it can be undone" : "it may NOT be undone");
    text($(card, ".url"), request.url);
    text($(card, ".reasons"), Array.isArray(request.reasons) ? request.reasons.join("; ") : "");
    $(card, ".again").hidden = !(request.attempt > 1);
    const type = IMAGE_TYPES[String(request.screenshot_format || "").toLowerCase()];
    const figure = $(card, "figure.shot");
    if (type && typeof request.screenshot_data === "string" && /^[A-Za-z0-9+/=]+$/.test(request.screenshot_data)) {
      $(figure, "img").src = `data:${type};base64,${request.screenshot_data}`;
      const known = sessions.get(message.session);
      if (known && Number.isInteger(action.x) && Number.isInteger(action.y)) {
        const mark = $(figure, ".mark");
        mark.style.left = `${(100 * action.x / known.view.screen.width).toFixed(3)}%`;
        mark.style.top = `${(100 * action.y / known.view.screen.height).toFixed(3)}%`;
        mark.hidden = false;
      }
    } else {
      figure.hidden = true;
    }
    const question = addQuestion(request.id, "confirm", message.session, card);
    const answer = (approve) => {
      if (send({type: "confirm", id: nextId("confirm"), request_id: request.id, approve, digest: request.digest})) {
        status(approve ? "approved" : "denied");
        dropQuestion(request.id);
      }
    };
    $(card, "button.approve").addEventListener("click", () => answer(true));
    $(card, "button.deny").addEventListener("click", () => answer(false));
    question.timer = countdown(card, request.id, request.timeout_s);
  }

  function showPause(message) {
    const notice = message.notice || {};
    if (typeof notice.id !== "string") return;
    const card = clone("tpl-pause");
    text($(card, ".task"), taskOf(message.session));
    text($(card, ".kind"), notice.kind);
    text($(card, ".message"), notice.message);
    text($(card, ".url"), notice.url);
    const evidence = $(card, ".evidence");
    for (const quote of Array.isArray(notice.evidence) ? notice.evidence : []) {
      const block = document.createElement("blockquote");
      text(block, quote);
      evidence.append(block);
    }
    const question = addQuestion(notice.id, "pause", message.session, card);
    const answer = (value) => {
      if (send({type: "review", id: nextId("review"), pause_id: notice.id, answer: value})) {
        status(`answered: ${value}`);
        dropQuestion(notice.id);
      }
    };
    $(card, "button.resume").addEventListener("click", () => answer("resume"));
    $(card, "button.cancel").addEventListener("click", () => answer("cancel"));
    $(card, "button.takeover").addEventListener("click", () => answer("takeover"));
    question.timer = countdown(card, notice.id, notice.timeout_s);
  }

  function showCredential(message) {
    const request = message.request || {};
    if (typeof request.request_id !== "string") return;
    const card = clone("tpl-credential");
    text($(card, ".task"), taskOf(message.session));
    text($(card, ".label"), request.label);
    text($(card, ".url"), request.url);
    const field = request.field || {};
    text($(card, ".field"), `${field.role || ""} ${field.name ? `“${field.name}”` : ""}`.trim());
    addQuestion(request.request_id, "credential", message.session, card);
    const secret = $(card, "input.secret");
    $(card, "form.secret-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = secret.value;
      secret.value = "";
      if (value && send({type: "credential", id: nextId("credential"), request_id: request.request_id, secret: value})) {
        status("credential sent");
        dropQuestion(request.request_id);
      }
    });
    $(card, "button.cancel").addEventListener("click", () => {
      secret.value = "";
      if (send({type: "credential", id: nextId("credential"), request_id: request.request_id, cancel: true})) {
        dropQuestion(request.request_id);
      }
    });
    secret.focus();
  }

  // A question nobody may answer any more stays on screen, saying why, until dismissed.
  function withdrawQuestion(message) {
    const question = questions.get(message.id);
    if (question === undefined) return;
    if (question.timer !== null) clearInterval(question.timer);
    questions.delete(message.id);
    const card = question.card;
    card.classList.add("withdrawn");
    for (const control of card.querySelectorAll("button, input")) control.disabled = true;
    const secret = card.querySelector("input.secret");
    if (secret !== null) secret.value = "";
    const countdown = card.querySelector(".countdown");
    if (countdown !== null) text(countdown, "withdrawn");
    const note = document.createElement("p");
    note.className = "withdrawn-reason";
    const undone = question.kind === "confirm" ? " The action was not run." : "";
    text(note, `Withdrawn: ${message.reason}.${undone}`);
    $(card, "header").after(note);
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "dismiss";
    text(dismiss, "Dismiss");
    dismiss.addEventListener("click", () => { card.remove(); refreshEmpty(); });
    card.append(dismiss);
    refreshEmpty();
  }

  // ---- the connection ----------------------------------------------------------------------

  function onMessage(raw) {
    let message;
    try { message = JSON.parse(raw); } catch (error) { return; }
    if (message === null || typeof message !== "object") return;
    switch (message.type) {
      case "session": upsertSession(message); break;
      case "confirmation_required": showConfirmation(message); break;
      case "pause_required": showPause(message); break;
      case "credential_required": showCredential(message); break;
      case "question_withdrawn": withdrawQuestion(message); break;
      case "takeover_state": setTakeover(message); break;
      case "error": status(`refused: ${(message.error && message.error.message) || "error"}`, true); break;
      default: break;
    }
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    // The page secret rides as a subprotocol: the cookie alone opens no websocket (secret.js).
    ws = new WebSocket(`${scheme}//${location.host}/console/ws`, window.deskpodPageSecret.protocols());
    ws.addEventListener("open", () => status(`connected as ${me.name} (${me.role})`));
    ws.addEventListener("message", (event) => onMessage(event.data));
    ws.addEventListener("close", () => {
      status("disconnected: reload the page to reconnect (sign in again if asked)", true);
      ws = null;
    });
  }

  async function start() {
    const secret = window.deskpodPageSecret.value();
    // Without its page secret (signed in before it was given, or storage cleared) the page
    // can act on nothing: sign in again, which gives one.
    if (!secret) { location.assign("/console/signin"); return; }
    const signout = document.getElementById("signout");
    signout.elements.page_secret.value = secret;
    signout.addEventListener("submit", () => window.deskpodPageSecret.forget());
    const reply = await fetch("/console/me", {credentials: "same-origin"});
    if (reply.status === 401) { location.assign("/console/signin"); return; }
    me = await reply.json();
    text(document.getElementById("me"), `${me.name} (${me.role})`);
    document.body.dataset.role = me.role;
    refreshEmpty();
    connect();
  }

  document.addEventListener("DOMContentLoaded", () => { start(); });
})();
