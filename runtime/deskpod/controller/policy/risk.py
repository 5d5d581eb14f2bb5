"""Risk levels of GUI actions, from the action and what the sandbox reports under it.

Four levels, assigned by deterministic host rules. The vendors' computer-use
guides ask for a human's confirmation before consequential actions (payments,
deletions, sending, accepting terms): OpenAI's computer use guide
(https://platform.openai.com/docs/guides/tools-computer-use) and Anthropic's
computer use tool documentation
(https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/computer-use-tool).
The levels say which actions those are:

- ``L0`` observation: screenshot, wait, move, scroll, zoom, cursor position.
- ``L1`` reversible input: clicks and typing not matched below, writing the clipboard,
  recovering a tab whose page does not answer (``recover_tab``: its URL loaded again),
  focusing, moving or resizing a window (:mod:`.window_risk`), starting a desktop
  application (``open_app``: it runs in the applications' zone, as agent code does), and
  clicks, typing and keys in a desktop application's window (the daemon's X gate names the
  window's source, not the program), but a key in the terminal that may run the line typed
  there (Enter, Ctrl+J, any Control or Alt chord: all but characters, deletions and moves) is
  ``L2``, and a press of a native control is judged by its name (:mod:`.native_risk`).
- ``L2`` sensitive data or widened access: typing into a password or payment
  field (or text that looks like a card number), a file upload control,
  ``set_files`` or ``drop_files``, reading the clipboard (``clipboard_read``: a page may have copied a
  secret there; ``L1`` when the task allows reading it), a download, a link to a domain this run has not visited yet, a form submission
  the policy's ``l2_words`` name (sign in, upload, share...), closing a window (``window_close``:
  its program may lose unsaved work).

Going to a URL is judged one way however it is done (:func:`link_risk`): a click on a
link to it, a ``navigate`` action (``L1``, no control pressed: whatever has the focus
plays no part) and, in the GUI run, the URL typed into the address bar
(:mod:`deskpod.controller.gui.omnibox`) are ``L2`` when it names a download or a host
this run has not visited; the run checks it against the allowlists before it is sent.
- ``L3`` irreversible or high impact: pressing a control whose accessible name
  or text holds one of the policy's ``l3_words`` (pay, buy, order, delete, send,
  publish, transfer, permissions, accept terms...), by a click or by Enter/space.

A key is judged by what it will do (:meth:`ActionClassifier.classify` on a ``keypress``,
``hold_key`` or ``type``): Enter or space on a focused control presses it; Enter in a field
submits its form (pressing its submit button); a modified Enter (Control, Shift, Alt or Meta)
in a field presses the form's submit button or else the nearest labelled button
(:attr:`~deskpod.protocol.FocusedElement.near_buttons`: a chat box's "Send"); Enter in a
single-line field of a form with no submit button submits it: ``L2`` at least, judged by the
form's own labels (:attr:`~deskpod.protocol.FocusedElement.form_labels`); a chord matching a
control's ``accesskey`` or ``aria-keyshortcuts`` presses that control
(:func:`~deskpod.controller.policy.key_effects.pressed_shortcuts`); a printable key (or
Delete, BackSpace), pressed or typed, with nothing editable focused on a page listening for
keys (:attr:`~deskpod.protocol.PageKeys.listeners`) is ``L2`` at least: it may run one of the
page's own shortcuts. Arrows, Page Up/Down, Escape and text typed into a field stay ``L1``.

An element action (by ``[ref=eN]``) is judged as the click at its ref's point: the same
control, hit-tested there, by the same rules; an option chosen or a value set counts as
that control's label too (:mod:`deskpod.controller.gui.element_actions`).

Answering a JavaScript dialog (``dialog_accept``, ``dialog_dismiss``): dismissing
(Cancel, stay on the page) is ``L1``, acknowledging an ``alert`` too; accepting a
``confirm``, a ``prompt`` or a ``beforeunload`` (leave the page, unsaved data lost)
is ``L2``, and ``L3`` when the dialog's message or its page's URL holds one of the
``l3_words`` (a confirm on a payment page); a prompt answer that looks like a card
number is ``L2`` and redacted.

A window of the agent's own programs (an X client of a command granted the display,
:class:`deskpod.protocol.AgentWindow`) on top at a pointer action's point takes the
click, not the page: the action is ``L2`` and names that window (its application and
title); the page's control under it is not judged. So are keys and typed text while
such a window has the keyboard focus.

The context is what the daemon reads through CDP right before the action: the
control under the point (:class:`deskpod.protocol.ElementInfo`: hit-tested through
frames and shadow roots, labelled by its accessible name; an element with a click
listener or the pointer cursor counts as a control) and the focused element. Page content is untrusted, so it can only raise a level: a page can
make a button look harmless, which is why the sandbox, the allowlist and the
confirmation of every ``L3`` press are layered. A proposal's own label and vendor
safety checks raise the level too; nothing lowers it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

from deskpod.controller.keysplit import chord_keysyms
from deskpod.controller.policy.key_effects import (
    chord_modifiers,
    pressed_shortcuts,
    stays_on_the_line,
    types_character,
)
from deskpod.controller.policy.levels import RiskLevel, level_rank
from deskpod.controller.policy.native_risk import (
    describe_native,
    describe_window,
    file_dialog_answer,
    native_word_risk,
    pressed_native_label,
)
from deskpod.controller.policy.window_risk import window_action_risk
from deskpod.controller.policy.words import looks_like_card_number, matching_word, word_pattern
from deskpod.protocol import (
    Action,
    AgentWindow,
    Click,
    FileChooser,
    ClickElement,
    ClipboardRead,
    ClipboardWrite,
    Dialog,
    DialogAccept,
    DialogDismiss,
    DoubleClick,
    Drag,
    DragElement,
    DropFiles,
    ElementInfo,
    FillForm,
    FocusedElement,
    HoldKey,
    Keypress,
    MouseDown,
    MouseUp,
    NativeDialog,
    NativeElement,
    Navigate,
    OpenApp,
    RecoverTab,
    PageKeys,
    SelectOption,
    SetFiles,
    TripleClick,
    TypeElement,
    TypeText,
    Window,
    WindowClose,
    WindowFocus,
    WindowMove,
    WindowResize,
    action_points,
)

__all__ = [
    "ActionClassifier",
    "ActionContext",
    "ActionRisk",
    "DEFAULT_L2_WORDS",
    "DEFAULT_L3_WORDS",
    "DOWNLOAD_EXTENSIONS",
    "action_point",
    "classify_action",
    "file_dialog_risk",
    "is_sensitive_field",
    "link_risk",
    "looks_like_download",
    "url_host",
]

DEFAULT_L3_WORDS: tuple[str, ...] = (
    "pay", "pay now", "buy", "purchase", "place order", "order now", "checkout", "check out", "subscribe",
    "delete", "remove", "erase", "destroy", "send", "publish", "post", "transfer", "wire", "donate",
    "close account", "deactivate", "permissions", "grant", "authorize", "accept terms", "i agree", "agree",
    "confirm payment", "confirm order", "submit order",
    "付款", "支付", "购买", "下单", "提交订单", "删除", "发送", "发布", "转账", "授权", "同意",
)
"""Words in a control's name or text that make pressing it ``L3`` (irreversible:
payment, deletion, sending, publishing, permissions, closing an account, terms)."""

DEFAULT_L2_WORDS: tuple[str, ...] = (
    "submit", "sign in", "log in", "login", "sign up", "register", "upload", "share", "invite", "save card",
    "提交", "登录", "注册", "上传", "分享",
)
"""Words that make pressing a control ``L2``: it sends data to the site."""

DOWNLOAD_EXTENSIONS: frozenset[str] = frozenset(
    "exe msi dmg pkg deb rpm apk zip tar gz tgz bz2 xz 7z rar iso img bin sh bat ps1 jar pdf doc docx xls xlsx".split()
)
"""URLs naming a file with one of these extensions count as downloads (:func:`looks_like_download`)."""

_SENSITIVE_FIELD = re.compile(
    r"(passw|passcode|pin\b|cvv|cvc|csc|card|cc-|iban|account.?number|routing|ssn|social.?security|tax.?id|"
    r"身份证|银行卡|密码)",
    re.IGNORECASE,
)
_CONTROL_TAGS = frozenset({"a", "button", "input", "summary", "label", "select"})
_ENTER_KEYS = frozenset({"return", "enter", "kp_enter", "linefeed", "iso_enter", "3270_enter"})
_PRESS_KEYS = _ENTER_KEYS | {"space", "kp_space", " "}
_PRESSABLE_ROLES = frozenset({"button", "link", "checkbox", "radio", "switch", "menuitem", "tab", "option"})
_CONTROL_ROLES = _PRESSABLE_ROLES | {"menuitemcheckbox", "menuitemradio", "treeitem", "combobox", "listbox",
                                     "slider", "spinbutton", "textbox", "searchbox", "PopUpButton", "ToggleButton"}


@dataclass(frozen=True)
class ActionContext:
    """What the controller knows right before one action.

    ``url``: the active tab's URL. ``element``: the control under the action's
    point (``None``: the action has no point, or nothing is there). ``focused``: the
    element with the keyboard focus. ``visited_hosts``: hosts this run's browser
    has been at (lower case). ``dialog``: the JavaScript dialog a ``dialog_accept``
    or ``dialog_dismiss`` answers (``None``: none is open). ``window``: the agent's
    window on top at the action's point; ``focus_window``: the agent's window with the
    keyboard focus (``None``: the sandbox's own). ``page_keys``: the page's declared key
    shortcuts and key listeners (``None``: not read). ``windows``: the desktop's windows as last
    listed (:attr:`~deskpod.protocol.Observation.windows`; ``None``: not listed), naming a window
    action's window. ``native_at``, ``native_focused``: the native controls under the point and
    with the focus in a desktop application's window; ``native_unread``: its application could not
    be asked; ``native_dialog``: the focused application window as a dialog (:mod:`.native_risk`).
    ``file_chooser``: the file chooser a ``set_files`` answers (the page's or an application's).
    """

    url: str | None = None
    element: ElementInfo | None = None
    focused: FocusedElement | None = None
    visited_hosts: frozenset[str] = frozenset()
    dialog: Dialog | None = None
    window: AgentWindow | None = None
    focus_window: AgentWindow | None = None
    page_keys: PageKeys | None = None
    windows: Sequence[Window] | None = None
    native_at: NativeElement | None = None
    native_focused: NativeElement | None = None
    native_unread: bool = False
    native_dialog: NativeDialog | None = None
    file_chooser: FileChooser | None = None


@dataclass(frozen=True)
class ActionRisk:
    """The level of one action and why. ``reasons``: one short sentence per rule that
    fired (the highest first). ``target``: what the action acts on, for a human
    (``"button 'Pay now'"``). ``sensitive``: typed text must be redacted."""

    level: RiskLevel
    reasons: tuple[str, ...] = ()
    target: str = ""
    sensitive: bool = False

    def raised(self, level: RiskLevel, reason: str) -> ActionRisk:
        """This assessment with ``level`` applied (raise only) and ``reason`` recorded."""
        if level_rank(level) > level_rank(self.level):
            return ActionRisk(level, (reason, *self.reasons), self.target, self.sensitive)
        if level == self.level and level != "L0":
            return ActionRisk(self.level, (*self.reasons, reason), self.target, self.sensitive)
        return self


def action_point(action: Action) -> tuple[int, int] | None:
    """The model-space point where a pointer action presses or releases a button (a
    drag's drop point), from :func:`deskpod.protocol.action_points`; ``None`` for other
    actions and for clicks without coordinates (they act where the pointer is)."""
    if not isinstance(action, (Click, DoubleClick, TripleClick, MouseDown, MouseUp, Drag)):
        return None
    points = action_points(action)
    return (points[-1].x, points[-1].y) if points else None


def _describe(element: ElementInfo) -> str:
    label = element.name or element.text or element.href or ""
    kind = element.role or (f"input[{element.input_type}]" if element.input_type else element.tag)
    where = f" in a frame from {url_host(element.frame) or element.frame[:80]}" if element.frame else ""
    return (f"{kind} {label.strip()[:80]!r}" if label else kind) + where


_TERMINAL_RUNS = ("runs the command line typed in the terminal (the applications' zone): what it does is not "
                  "read before it runs")


def file_dialog_risk(risk: ActionRisk, dialog: NativeDialog | None) -> ActionRisk:
    """``risk`` raised to ``L2`` while a desktop application's file dialog has the focus (GTK's
    file chooser: what it opens is read, what it saves may replace a file)."""
    if dialog is None or dialog.role != "file chooser":
        return risk
    return risk.raised("L2", f"acts in a file dialog ({dialog.title or dialog.app or 'file chooser'!r}): a file is "
                             "chosen to open, or to save over")


def _is_control(element: ElementInfo) -> bool:
    return element.tag in _CONTROL_TAGS or element.role in _CONTROL_ROLES or element.clickable


def url_host(url: str | None) -> str:
    """The host of ``url`` in lower case (``""`` when it has none)."""
    return (urlsplit(url or "").hostname or "").lower()


def looks_like_download(url: str) -> bool:
    """Whether ``url`` names a file a browser would download: its path, or a query value
    (``/download?name=report.pdf``), ends in one of :data:`DOWNLOAD_EXTENSIONS`."""
    parts = urlsplit(url)
    names = [parts.path.rsplit("/", 1)[-1]] + [v for _, v in parse_qsl(parts.query)]
    return any("." in n and n.rsplit(".", 1)[-1].lower() in DOWNLOAD_EXTENSIONS for n in names)


def link_risk(risk: ActionRisk, url: str, context: ActionContext, means: str) -> ActionRisk:
    """``risk`` raised as going to ``url`` is, however it is done: the one judgment of a
    link's target, of a ``navigate`` and of the address bar's URL.

    Args:
        risk: the action's level so far.
        url: where it goes.
        context: the page it leaves (``url``) and the hosts this run has visited.
        means: how it goes there, for the reasons (``"a link"``, ``"navigate"``...).

    Returns:
        ``risk`` raised to ``L2`` when ``url``'s host is neither the page's nor one this
        run has visited, and when ``url`` names a download (:func:`looks_like_download`).
    """
    host = url_host(url)
    if host and host != url_host(context.url) and host not in context.visited_hosts:
        risk = risk.raised("L2", f"goes to {host} by {means}, a domain this run has not visited")
    if looks_like_download(url):
        risk = risk.raised("L2", f"starts a download by {means}")
    return risk


def _press_risk(
    risk: ActionRisk, label: str, l3: re.Pattern[str] | None, l2: re.Pattern[str] | None, how: str
) -> ActionRisk:
    word = matching_word(label, l3)
    if word:
        return risk.raised("L3", f"{how} a control labelled {word!r}: may be irreversible (payment, deletion, "
                                 "sending, publishing, permissions or terms)")
    word = matching_word(label, l2)
    if word:
        return risk.raised("L2", f"{how} a control labelled {word!r}: sends data to the site")
    return risk


class ActionClassifier:
    """Assigns :class:`ActionRisk` to actions under one policy's word lists.

    Args:
        l3_words: words that make pressing a control ``L3`` (default :data:`DEFAULT_L3_WORDS`).
        l2_words: words that make it ``L2`` (default :data:`DEFAULT_L2_WORDS`).
        clipboard_read: the task allows reading the clipboard (``clipboard_read`` is then
            ``L1``, else ``L2``).
    """

    def __init__(self, l3_words: Sequence[str] = DEFAULT_L3_WORDS, l2_words: Sequence[str] = DEFAULT_L2_WORDS,
                 clipboard_read: bool = False):
        self._l3 = word_pattern(l3_words)
        self._l2 = word_pattern(l2_words)
        self._clipboard_read = clipboard_read

    def classify(self, action: Action, context: ActionContext) -> ActionRisk:
        """The level of ``action`` in ``context``.

        Args:
            action: one protocol action (coordinates in the model space).
            context: the page under it, read just before (see :class:`ActionContext`).

        Returns:
            The :class:`ActionRisk`; ``L0`` for actions that change nothing.
        """
        if isinstance(action, (Click, DoubleClick, TripleClick, MouseUp, Drag)):
            return self._pointer(action, context)
        if isinstance(action, TypeText):
            return self._typing(action, context)
        if isinstance(action, (Keypress, HoldKey)):
            return self._keys(action, context)
        if isinstance(action, MouseDown):
            return ActionRisk("L1", ("presses a mouse button",))
        if isinstance(action, SetFiles) and (native := file_dialog_answer(context.file_chooser, action.paths)):
            return ActionRisk("L2", (native[0],), native[1])
        if isinstance(action, (SetFiles, DropFiles)):
            return ActionRisk("L2", ("uploads workspace files to the page: they may leave the sandbox",),
                              ", ".join(action.paths)[:200])
        if isinstance(action, (DialogAccept, DialogDismiss)):
            return self._dialog(action, context)
        if isinstance(action, ClipboardRead):
            if self._clipboard_read:
                return ActionRisk("L1", ("reads the clipboard (the task allows it)",), "clipboard")
            return ActionRisk("L2", ("reads the clipboard: a page or a program may have copied a secret there",),
                              "clipboard")
        if isinstance(action, ClipboardWrite):
            return ActionRisk("L1", ("writes the clipboard: the next paste pastes it",), "clipboard")
        if isinstance(action, (ClickElement, TypeElement, SelectOption, DragElement, FillForm)):
            return self._element(action, context)
        if isinstance(action, RecoverTab):
            return ActionRisk("L1", ("stops a page that does not answer and loads its URL again: what was typed "
                                     "there is lost",), f"tab {action.tab_id}" if action.tab_id else "the unresponsive tab")
        if isinstance(action, OpenApp):
            return ActionRisk("L1", (f"starts the desktop application {action.app!r} in the applications' zone",),
                              action.app + (f" {action.path}" if action.path else ""))
        if isinstance(action, (WindowFocus, WindowClose, WindowMove, WindowResize)):
            return ActionRisk(*window_action_risk(action, context.windows))
        if isinstance(action, Navigate):  # as a link to its URL with no label
            return link_risk(ActionRisk("L1", ("opens a URL in the active tab",), action.url), action.url,
                             context, "navigate")
        return ActionRisk("L0", ("observation or pointer movement only",))

    def _element(self, action: ClickElement | TypeElement | SelectOption | DragElement | FillForm,
                 context: ActionContext) -> ActionRisk:
        """An element action, with ``context.element`` the control at its ref's point: a
        click there (the run turns most element actions into their pixels before judging:
        :mod:`deskpod.controller.gui.element_actions`), and the chosen or typed values count as
        well: an option labelled "Delete account" is pressed as a button so labelled would be."""
        risk = self._pointer(Click(type="click"), context)
        values: list[str] = []
        if isinstance(action, SelectOption):
            values = list(action.values)
        elif isinstance(action, FillForm):
            values = [f.value for f in action.fields]
        elif isinstance(action, TypeElement):
            values = [action.text]
            if looks_like_card_number(action.text):
                risk = ActionRisk(risk.level, risk.reasons, risk.target, True)
                risk = risk.raised("L2", "types what looks like a payment card number")
        if not isinstance(action, TypeElement) and values:
            risk = _press_risk(risk, " ".join(values), self._l3, self._l2, f"{action.type.replace('_', ' ')}s")
        return risk

    def _dialog(self, action: DialogAccept | DialogDismiss, context: ActionContext) -> ActionRisk:
        dialog = context.dialog
        target = f"{dialog.type} dialog {dialog.message[:80]!r}" if dialog else "a JavaScript dialog"
        if isinstance(action, DialogDismiss):
            return ActionRisk("L1", ("dismisses a JavaScript dialog (Cancel: stays on the page)",), target)
        if dialog is None:
            return ActionRisk("L1", ("accepts a JavaScript dialog",), target)
        risk = ActionRisk("L1", ("acknowledges an alert",), target)
        if dialog.type == "beforeunload":
            risk = risk.raised("L2", "leaves a page that asks to stay: what was typed there may be lost")
        elif dialog.type != "alert":
            risk = risk.raised("L2", f"answers yes to the page's {dialog.type}")
        if dialog.type != "alert":
            word = matching_word(dialog.message, self._l3)
            if word:
                risk = risk.raised("L3", f"accepts a dialog whose message says {word!r}: may be irreversible")
            page = re.sub(r"[^0-9a-z]+", " ", urlsplit(dialog.url or context.url or "").path.lower())
            word = matching_word(page, self._l3)
            if word:
                risk = risk.raised("L3", f"accepts a {dialog.type} on a page whose address says {word!r}")
        if isinstance(action, DialogAccept) and action.text and looks_like_card_number(action.text):
            risk = ActionRisk(risk.level, risk.reasons, risk.target, True)
            risk = risk.raised("L2", "answers a prompt with what looks like a card number")
        return risk

    def _pointer(self, action: Click | DoubleClick | TripleClick | MouseUp | Drag, context: ActionContext) -> ActionRisk:
        if context.window is not None and context.window.source != "command":
            risk = ActionRisk("L1", ("clicks in a desktop application's window (the applications' zone), not on the "
                                     "page",), describe_native(context.window, context.native_at))
            return self._native_press(file_dialog_risk(risk, context.native_dialog), context.native_at,
                                      context.native_unread, "presses")
        if context.window is not None:
            return ActionRisk("L2", ("clicks on a window of the agent's own programs over the browser, not on the "
                                     "page: the page's control under it is not what is pressed",),
                              describe_window(context.window))
        element = context.element
        if isinstance(action, Drag):
            risk = ActionRisk("L1", ("drags on the page",), _describe(element) if element else "")
        else:
            risk = ActionRisk("L1", ("clicks on the page",), _describe(element) if element else "")
        if element is None:
            return risk
        if element.frame_unreadable:
            risk = risk.raised("L2", "the point is in a frame whose content could not be read")
        if element.input_type == "file":
            risk = risk.raised("L2", "opens a file upload control: a file may leave the sandbox")
        if element.download:
            risk = risk.raised("L2", "starts a download (a link with a download attribute)")
        if element.href:
            risk = link_risk(risk, element.href, context, "a link")
        if _is_control(element):
            label = " ".join(filter(None, [element.name, element.text]))
            risk = _press_risk(risk, label, self._l3, self._l2, "presses")
        return risk

    def _native_press(self, risk: ActionRisk, element: NativeElement | None, unread: bool, how: str) -> ActionRisk:
        """``risk`` raised by what pressing the native control ``element`` does (:mod:`.native_risk`)."""
        if unread:
            return risk.raised("L2", "the desktop application's controls could not be read, so the control is unknown")
        label = pressed_native_label(element)
        if label is None:
            return risk
        if (native := native_word_risk(label)) is not None:
            risk = risk.raised(native[0], f"{how} {native[1]}")
        return _press_risk(risk, label, self._l3, self._l2, how)

    def _typing(self, action: TypeText, context: ActionContext) -> ActionRisk:
        if context.focus_window is not None and context.focus_window.source != "command":
            risk = file_dialog_risk(ActionRisk("L1", ("types into a desktop application (it has the keyboard focus), "
                                                      "not into the page",),
                                               describe_native(context.focus_window, context.native_focused)),
                                    context.native_dialog)
            if context.focus_window.source == "terminal" and ("\n" in action.text or "\r" in action.text):
                risk = risk.raised("L2", _TERMINAL_RUNS)
            if {" ", "\n", "\r"} & set(action.text):
                risk = self._native_press(risk, context.native_focused, context.native_unread,
                                          "types a space or newline that presses")
            if looks_like_card_number(action.text):
                return ActionRisk("L2", (*risk.reasons, "types what looks like a payment card number"), risk.target,
                                  True)
            return risk
        if context.focus_window is not None:
            return ActionRisk("L2", ("types into a window of the agent's own programs (it has the keyboard focus), "
                                     "not into the page",), describe_window(context.focus_window), True)
        focused = context.focused
        risk = ActionRisk("L1", ("types text",), _focus_target(focused))
        if focused is not None:
            field_words = " ".join(filter(None, [focused.name, focused.autocomplete, focused.input_type]))
            if focused.is_password:
                risk = risk.raised("L2", "types into a password field")
            elif _SENSITIVE_FIELD.search(field_words):
                risk = risk.raised("L2", f"types into a sensitive field ({field_words[:60]!r})")
            # Typed text presses keys: a space or a newline activates a focused button,
            # and a newline in a field submits its form.
            keys = {"space"} if " " in action.text else set()
            keys |= {"return"} if "\n" in action.text or "\r" in action.text else set()
            risk = self._pressing(risk, keys, focused, "types a space or newline that presses")
        if not (focused is not None and focused.editable):
            risk = _page_listening(risk, context.page_keys, "types text")
        if looks_like_card_number(action.text):
            risk = risk.raised("L2", "types what looks like a payment card number")
        sensitive = risk.level != "L1"
        return ActionRisk(risk.level, risk.reasons, risk.target, sensitive)

    def _keys(self, action: Keypress | HoldKey, context: ActionContext) -> ActionRisk:
        # A chord may come as one string ("shift+Return"): every key of it counts.
        keys = {part.strip().lower() for key in action.keys for part in key.split("+") if part.strip()}
        keys |= {" "} if " " in action.keys else set()
        keys |= {name.lower() for name in chord_keysyms(action.keys) or []}
        if context.focus_window is not None and context.focus_window.source != "command":
            risk = file_dialog_risk(ActionRisk("L1", ("presses keys in a desktop application (it has the keyboard "
                                                      "focus), not in the page",),
                                               describe_native(context.focus_window, context.native_focused)),
                                    context.native_dialog)
            if context.focus_window.source == "terminal" and not stays_on_the_line(chord_keysyms(action.keys)):
                risk = risk.raised("L2", _TERMINAL_RUNS)
            if keys & _PRESS_KEYS:
                risk = self._native_press(risk, context.native_focused, context.native_unread, "presses by key")
            return risk
        if context.focus_window is not None:
            return ActionRisk("L2", ("presses keys in a window of the agent's own programs (it has the keyboard "
                                     "focus), not in the page",), describe_window(context.focus_window))
        risk = ActionRisk("L1", ("presses keys",), _focus_target(context.focused))
        keysyms = chord_keysyms(action.keys) or []
        if context.page_keys is not None:
            for shortcut in pressed_shortcuts(keysyms, context.page_keys.shortcuts):
                how = f"presses by its {'access key' if shortcut.kind == 'accesskey' else 'declared shortcut'} " \
                      f"{shortcut.keys[:40]!r}"
                risk = _press_risk(risk, shortcut.label or "", self._l3, self._l2, how)
        if types_character(keysyms) and not (context.focused is not None and context.focused.editable):
            risk = _page_listening(risk, context.page_keys, "presses a character key")
        if context.focused is None:
            return risk
        modified = bool(chord_modifiers(keysyms) & {"control", "shift", "alt", "meta"})
        return self._pressing(risk, keys, context.focused, "presses (by key)", modified)

    def _pressing(self, risk: ActionRisk, keys: set[str], focused: FocusedElement, how: str,
                  modified: bool = False) -> ActionRisk:
        """Raise ``risk`` when ``keys`` (``modified``: with Control, Shift, Alt or Meta held)
        activate the focused control or submit its form (see the module)."""
        if not _PRESS_KEYS.intersection(keys):
            return risk
        if focused.role in _PRESSABLE_ROLES or focused.tag in ("button", "a", "summary"):
            risk = _press_risk(risk, focused.name or "", self._l3, self._l2, how)
        if not _ENTER_KEYS.intersection(keys):
            return risk
        if focused.form_submit:
            risk = _press_risk(risk, focused.form_submit, self._l3, self._l2, "submits (Enter) a form whose button is")
            if focused.is_password:
                risk = risk.raised("L2", "submits a form from a password field")
        elif focused.editable and modified and focused.near_buttons:
            risk = _press_risk(risk, " | ".join(focused.near_buttons), self._l3, self._l2,
                               "presses (a modified Enter in a field) the buttons beside it, one of them")
        if not focused.form_submit and focused.in_form and focused.editable and (focused.tag == "input" or modified):
            risk = risk.raised("L2", "submits (Enter) a form that has no submit button: it sends what was typed")
            risk = _press_risk(risk, " | ".join(focused.form_labels), self._l3, self._l2,
                               "submits (Enter) a form with no button, named as if by")
        return risk


def _page_listening(risk: ActionRisk, keys: PageKeys | None, what: str) -> ActionRisk:
    """``risk`` raised to ``L2`` when the page listens for keys (nothing editable has the focus)."""
    if keys is None or not keys.listeners:
        return risk
    return risk.raised("L2", f"{what} with nothing editable focused, on a page listening for keys (on its "
                             f"{', '.join(keys.listeners)}): it may run one of the page's shortcuts (delete, send...)")


def is_sensitive_field(focused: FocusedElement | None) -> bool:
    """True when ``focused`` is a password field or its name, ``autocomplete`` or type
    says it holds a secret or payment data (a card number, CVC, PIN, IBAN...): text typed
    into it is redacted wherever the action is recorded."""
    if focused is None:
        return False
    field_words = " ".join(filter(None, [focused.name, focused.autocomplete, focused.input_type]))
    return focused.is_password or bool(_SENSITIVE_FIELD.search(field_words))


def _focus_target(focused: FocusedElement | None) -> str:
    if focused is None:
        return ""
    return f"{focused.role or focused.tag} {focused.name!r}" if focused.name else (focused.role or focused.tag)


def classify_action(action: Action, context: ActionContext) -> ActionRisk:
    """:meth:`ActionClassifier.classify` with the default word lists."""
    return _DEFAULT.classify(action, context)


_DEFAULT = ActionClassifier()
