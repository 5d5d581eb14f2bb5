"""The scripts :class:`~deskpod.agentd.browser.frames.FrameReader` runs in a page's documents
(in its isolated world): what is under a point, which element is a control and how it is
labelled, the focused element, a document's text. They only read; what they return is page
data, untrusted, and the reader checks and cuts it."""

from __future__ import annotations

from typing import Final

from deskpod.protocol import MAX_SELECT_OPTIONS
from deskpod.protocol.observation import MAX_NEAR_LABELS

__all__ = ["ACTIVE_SCRIPT", "CHAIN_SCRIPT", "DESCRIBE_SCRIPT", "FOCUS_SCRIPT", "LANDS_ON_SCRIPT", "TEXT_SCRIPT",
           "TRAITS_SCRIPT"]

CHAIN_SCRIPT: Final = r"""function (limit) {
  const up = (n) => n.assignedSlot || n.parentElement || (n.parentNode && n.parentNode.host) || null;
  const out = [];
  let n = this.nodeType === 1 ? this : up(this);
  while (n && out.length < limit && n !== n.ownerDocument.body && n !== n.ownerDocument.documentElement) {
    out.push(n);
    n = up(n);
  }
  return out;
}"""
"""Called on the node under the point: it and its composed ancestors below ``<body>``."""

TRAITS_SCRIPT: Final = r"""function () {
  const sel = "a[href],button,input,select,textarea,label,summary,[role=button],[role=link],[role=menuitem],"
    + "[role=checkbox],[role=radio],[role=switch],[role=tab],[role=option]";
  return this.map((e) => [e.matches(sel), getComputedStyle(e).cursor === "pointer"]);
}"""
"""Called on that chain: per element, ``[is a semantic control, has cursor: pointer]``."""

DESCRIBE_SCRIPT: Final = r"""function () {
  const e = this, tag = e.tagName.toLowerCase();
  const form = e.form || e.closest("form");
  const label = e.getAttribute("aria-label") || e.getAttribute("alt") || e.getAttribute("title")
    || e.getAttribute("placeholder") || e.getAttribute("name");
  return {tag, role: e.getAttribute("role"), name: label ? String(label).slice(0, 200) : null,
          text: (e.innerText || e.value || "").slice(0, 200) || null,
          href: typeof e.href === "string" && e.href ? e.href : null,
          input_type: tag === "input" ? (e.type || "text").toLowerCase() : null,
          download: tag === "a" && e.hasAttribute("download"), form_action: form ? String(form.action).slice(0, 2000) : null,
          options: tag === "select" ? Array.from(e.options).slice(0, MAX_OPTIONS).map(
            (o) => ({value: String(o.value).slice(0, 200), label: String(o.label).slice(0, 200)})) : null};
}""".replace("MAX_OPTIONS", str(MAX_SELECT_OPTIONS))
"""Called on the control: what :class:`deskpod.protocol.ElementInfo` needs besides the box;
``role`` and ``name`` from its attributes, for when the accessibility tree has none; a
select's first options (value and label)."""

ACTIVE_SCRIPT: Final = r"""(() => {
  let e = document.activeElement;
  while (e && e.shadowRoot && e.shadowRoot.activeElement) e = e.shadowRoot.activeElement;
  return !e || e === document.body || e === document.documentElement ? null : e;
})()"""
"""The focused element of a document, through open shadow roots; ``null`` for none."""

FOCUS_SCRIPT: Final = r"""function () {
  const e = this;
  const tag = e.tagName.toLowerCase();
  const type = tag === "input" ? (e.type || "text").toLowerCase() : null;
  const implied = {a: "link", button: "button", textarea: "textbox", select: "combobox"}[tag]
    || (tag === "input" ? ({checkbox: "checkbox", radio: "radio", button: "button", submit: "button",
                           range: "slider", search: "searchbox"}[type] || "textbox") : null)
    || (e.isContentEditable ? "textbox" : null);
  const pressable = ["a", "button", "summary"].includes(tag) || ["submit", "button", "reset"].includes(type);
  const label = e.getAttribute("aria-label") || (e.labels && e.labels[0] && e.labels[0].innerText)
    || e.getAttribute("placeholder") || e.getAttribute("title") || e.getAttribute("name")
    || (pressable ? (e.innerText || e.value) : null);
  const noText = ["checkbox", "radio", "button", "submit", "range", "color", "file", "image", "reset"];
  const editable = e.isContentEditable || tag === "textarea" || (tag === "input" && !noText.includes(type));
  const form = e.form || e.closest("form");
  const find = (root, sel) => Element.prototype.querySelector.call(root, sel);
  const submit = form && find(form, "button:not([type]),button[type=submit],input[type=submit]");
  const clean = (s) => String(s || "").replace(/\s+/g, " ").trim().slice(0, 200);
  const attr = (n, a) => Element.prototype.getAttribute.call(n, a);
  const text = (n) => n ? n.innerText : null;
  let action = null;
  try { action = attr(form, "action") && new URL(attr(form, "action"), document.baseURI).pathname.replace(/[/_.-]+/g, " "); }
  catch (err) { action = null; }
  const formLabels = form ? [attr(form, "aria-label"), attr(form, "title"), attr(form, "name"), attr(form, "id"),
    text(find(form, "legend")), action, text(find(form, "h1,h2,h3,h4,h5,h6"))].map(clean).filter(Boolean) : [];
  const near = [];
  const up = (n) => n.parentElement || (n.parentNode && n.parentNode.host) || null;
  for (let a = editable ? up(e) : null, k = 0; a && k < 32 && !near.length; a = up(a), k++) {
    for (const b of Element.prototype.querySelectorAll.call(a, "button,[role=button],input[type=submit]")) {
      const said = b === e ? "" : clean(attr(b, "aria-label") || b.innerText || b.value || attr(b, "title"));
      if (said && near.length < NEAR) near.push(said);
    }
  }
  return {tag, role: e.getAttribute("role") || implied, name: label ? String(label).slice(0, 200) : null,
          input_type: type, is_password: type === "password", editable: !!editable && !e.disabled && !e.readOnly,
          autocomplete: e.getAttribute("autocomplete") ? e.getAttribute("autocomplete").slice(0, 100) : null,
          form_submit: submit ? String(submit.innerText || submit.value || "submit").slice(0, 200) : null,
          in_form: !!form, form_labels: formLabels.slice(0, NEAR), near_buttons: near};
}""".replace("NEAR", str(MAX_NEAR_LABELS))
"""Called on the focused element: :class:`deskpod.protocol.FocusedElement`'s fields; ``near_buttons``
only for an element that takes text (the nearest ancestor holding a labelled button, at most 32 up)."""

TEXT_SCRIPT: Final = "document.body ? document.body.innerText : ''"

LANDS_ON_SCRIPT: Final = r"""function (target) {
  for (let n = this; n; n = n.parentNode || (n.nodeType === 11 ? n.host : null)) {
    if (n === target) return true;
    if (n.nodeType === 1 && n.tagName === "LABEL" && n.control === target) return true;
  }
  return false;
}"""
"""On the node hit at a point, with the ref's node as ``target``: true when the node is it,
inside it (through shadow roots to their hosts) or in a ``<label>`` of it."""
