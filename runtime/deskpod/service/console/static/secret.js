// deskpod console: the session's page secret (service/console/auth.py).
//
// The session cookie goes to every port of the console's host name, so it alone opens
// nothing that acts: the console's websockets and state-changing forms also need the
// page secret, which the service gives once, in its answer to the sign-in form (the
// meta "deskpod-page-secret" of that page). It is kept here, in this origin's
// localStorage (its own scheme, host and port, unlike a cookie), and offered on every
// websocket as the subprotocol "deskpod-page-secret.<secret>" beside "deskpod-console".
// No inline script, no eval: CSP-safe under script-src 'self'.
"use strict";

(function () {
  const KEY = "deskpod-console-page-secret";
  const PROTOCOL = "deskpod-console";
  const PREFIX = "deskpod-page-secret.";

  function read() {
    try { return window.localStorage.getItem(KEY); } catch (error) { return null; }
  }

  window.deskpodPageSecret = Object.freeze({
    // The secret this page holds, or null (signed in elsewhere, or storage cleared).
    value: read,
    // The subprotocols a console websocket offers.
    protocols: function () {
      const secret = read();
      return secret ? [PROTOCOL, PREFIX + secret] : [PROTOCOL];
    },
    // Forget it (on sign-out).
    forget: function () {
      try { window.localStorage.removeItem(KEY); } catch (error) { /* nothing kept */ }
    }
  });

  // The answer to the sign-in form: keep its secret, then open the console (replacing this
  // page in the history, so that going back does not post the form again).
  const given = document.querySelector('meta[name="deskpod-page-secret"]');
  if (given !== null && /^[A-Za-z0-9_-]{43}$/.test(given.content)) {
    window.localStorage.setItem(KEY, given.content);
    window.location.replace("/console/");
  }
}());
