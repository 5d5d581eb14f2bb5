"""The X gate's rules on an agent client's request stream (deskpod.agentd.display.xfilter): framed as the
X server frames it, in both byte orders, however the bytes are cut; what is refused and how."""

from __future__ import annotations

import struct

import pytest

from deskpod.agentd.display.xfilter import (
    NO_OPERATION,
    QUERY_POINTER,
    ClientSetup,
    GateRules,
    Held,
    RequestStream,
    client_setup_length,
    decide,
    parse_client_setup,
    parse_server_setup,
    selection_asked,
    server_setup_length,
    setup_refusal,
)

ROOT, BIG, UNOWNED, ACTIVE = 0x4A5, 133, 0x1F0, 0x1F1
RULES = GateRules(root=ROOT, big_requests_opcode=BIG, unowned_selection=UNOWNED, active_window_atom=ACTIVE)
AGENT_BASE, MASK = 0x00600000, 0x001FFFFF
AGENT_WINDOW, BROWSER_WINDOW = AGENT_BASE | 0x21, 0x00200007


def agent(window: int) -> bool:
    return window & ~MASK == AGENT_BASE


def request(order: str, opcode: int, body: bytes = b"", data: int = 0) -> bytes:
    """A request in the normal form: header (length in units) and body padded to 4 bytes."""
    body += b"\0" * (-len(body) % 4)
    return struct.pack(order + "BBH", opcode, data, 1 + len(body) // 4) + body


def big(order: str, opcode: int, body: bytes) -> bytes:
    """A request in the big form (length 0, then a 32-bit length)."""
    body += b"\0" * (-len(body) % 4)
    return struct.pack(order + "BBHI", opcode, 0, 0, 2 + len(body) // 4) + body


def forwarded(stream: RequestStream, data: bytes, step: int | None = None) -> list[bytes | Held]:
    """What ``stream`` forwards for ``data`` fed at once (``step=None``) or ``step`` bytes at a time;
    consecutive bytes pieces are joined."""
    pieces: list[bytes | Held] = []
    chunks = [data] if step is None else [data[i:i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        for piece in stream.feed(chunk):
            if isinstance(piece, bytes) and pieces and isinstance(pieces[-1], bytes):
                pieces[-1] += piece
            else:
                pieces.append(piece)
    return pieces


def send_event(order: str, destination: int, event_type: int, about: int = 0, message_type: int = 0) -> bytes:
    event = struct.pack(order + "BBHII", event_type, 32, 0, about, message_type) + b"\0" * 20
    return request(order, 25, struct.pack(order + "II", destination, 0) + event)


def convert_selection(order: str, selection: int) -> bytes:
    return request(order, 24, struct.pack(order + "IIIII", AGENT_WINDOW, selection, 0x1F2, 0x1F3, 0))


ORDERS = ["<", ">"]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("step", [None, 1, 3, 7])
def test_ordinary_requests_pass_unchanged_however_the_bytes_are_cut(order: str, step: int | None) -> None:
    stream = request(order, 8, struct.pack(order + "I", AGENT_WINDOW))  # MapWindow
    stream += request(order, 72, bytes(range(256)) * 40)  # PutImage, 10 KiB
    stream += request(order, 43)  # GetInputFocus
    assert forwarded(RequestStream(order, RULES), stream, step) == [stream]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("step", [None, 1, 5])
def test_grabs_and_mapping_changes_become_a_query_pointer_whose_reply_reads_refused(order: str, step: int | None) -> None:
    query = struct.pack(order + "BBHI", QUERY_POINTER, 0, 2, ROOT)
    for opcode, body in ((26, struct.pack(order + "IHBBIII", AGENT_WINDOW, 4, 1, 1, 0, 0, 0)),  # GrabPointer
                         (31, struct.pack(order + "IIBBxx", AGENT_WINDOW, 0, 1, 1)),  # GrabKeyboard
                         (116, bytes([3, 2, 1])),  # SetPointerMapping
                         (118, bytes(16))):  # SetModifierMapping
        after = request(order, 43)
        pieces = forwarded(RequestStream(order, RULES), request(order, opcode, body) + after, step)
        assert pieces == [query + after], opcode


@pytest.mark.parametrize("order", ORDERS)
def test_warps_server_grabs_focus_device_changes_and_the_bell_become_no_operations(order: str) -> None:
    for opcode in (36, 41, 42, 100, 102, 104, 105, 112, 115):
        sent = request(order, opcode, bytes(range(20)))
        assert forwarded(RequestStream(order, RULES), sent) == [bytes([NO_OPERATION]) + sent[1:]], opcode


@pytest.mark.parametrize("order", ORDERS)
def test_send_event_reaches_only_the_agents_windows(order: str) -> None:
    def judged(sent: bytes) -> bytes:
        (held,) = forwarded(RequestStream(order, RULES), sent)
        assert isinstance(held, Held) and held.request == sent
        return decide(held, order, RULES, agent)

    to_own = send_event(order, AGENT_WINDOW, 2)  # a KeyPress to its own window
    assert judged(to_own) == to_own
    for refused in (send_event(order, BROWSER_WINDOW, 2),  # a key to the browser
                    send_event(order, BROWSER_WINDOW, 33, BROWSER_WINDOW, 0x150),  # WM_DELETE_WINDOW, XDND...
                    send_event(order, 1, 2),  # InputFocus: whatever has the focus
                    send_event(order, ROOT, 33, BROWSER_WINDOW, 0x151),  # _NET_CLOSE_WINDOW of the browser
                    send_event(order, ROOT, 33, AGENT_WINDOW, ACTIVE),  # focus itself
                    send_event(order, ROOT, 2 | 0x80, AGENT_WINDOW)):  # not a ClientMessage
        assert judged(refused) == bytes([NO_OPERATION]) + refused[1:]
    ewmh = send_event(order, ROOT, 33, AGENT_WINDOW, 0x152)  # _NET_WM_STATE of its own window
    assert judged(ewmh) == ewmh


@pytest.mark.parametrize("order", ORDERS)
def test_convert_selection_reads_only_what_an_agent_client_owns(order: str) -> None:
    clipboard = 0x1E0
    sent = convert_selection(order, clipboard)
    (held,) = forwarded(RequestStream(order, RULES), sent)
    assert isinstance(held, Held) and selection_asked(held.request, order) == clipboard
    assert decide(held, order, RULES, agent, owner=AGENT_WINDOW) == sent
    for owner in (BROWSER_WINDOW, 0, None):
        assert decide(held, order, RULES, agent, owner) == convert_selection(order, UNOWNED)
    assert selection_asked(send_event(order, AGENT_WINDOW, 2), order) is None


@pytest.mark.parametrize("order", ORDERS)
def test_held_requests_of_another_length_or_in_the_big_form_are_dropped(order: str) -> None:
    longer = request(order, 25, bytes(48))
    assert forwarded(RequestStream(order, RULES), longer) == [bytes([NO_OPERATION]) + longer[1:]]
    stream = RequestStream(order, RULES)
    enable = request(order, BIG)
    assert forwarded(stream, enable) == [enable] and stream.big_requests
    as_big = big(order, 25, send_event(order, BROWSER_WINDOW, 2)[4:])
    assert forwarded(stream, as_big) == [bytes([NO_OPERATION]) + as_big[1:]]
    # A grab in the big form (which the server would honour) is still answered as refused.
    grab = big(order, 31, struct.pack(order + "IIBBxx", AGENT_WINDOW, 0, 1, 1))
    assert forwarded(stream, grab) == [struct.pack(order + "BBHI", QUERY_POINTER, 0, 2, ROOT)]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("step", [None, 1, 6])
def test_big_requests_are_framed_by_their_32_bit_length_once_enabled(order: str, step: int | None) -> None:
    stream = RequestStream(order, RULES)
    # Before BigReqEnable, a zero length is a 4-byte request: what follows is framed anew,
    # so a grab hidden where a big request's body would be is still seen.
    zero = struct.pack(order + "BBH", 72, 0, 0)
    grab = request(order, 31, struct.pack(order + "IIBBxx", AGENT_WINDOW, 0, 1, 1))
    query = struct.pack(order + "BBHI", QUERY_POINTER, 0, 2, ROOT)
    assert forwarded(stream, zero + grab, step) == [zero + query]
    assert not stream.big_requests
    # BigReqEnable of another length or minor opcode does not enable them (the server refuses it).
    for refused in (request(order, BIG, bytes(4)), request(order, BIG, data=1)):
        assert forwarded(stream, refused) == [refused] and not stream.big_requests
    enable = request(order, BIG)
    put = big(order, 72, bytes(range(256)) * 300)  # 75 KiB, past a 16-bit length
    assert forwarded(stream, enable + put + grab, step) == [enable + put + query]
    assert stream.big_requests


@pytest.mark.parametrize("order", ORDERS)
def test_a_big_request_the_server_would_kill_the_client_for_ends_the_stream(order: str) -> None:
    for units in (0, 1, 4_194_304):
        stream = RequestStream(order, RULES)
        forwarded(stream, request(order, BIG))
        assert forwarded(stream, struct.pack(order + "BBHI", 72, 0, 0, units) + bytes(64)) == []
        assert stream.closed is not None
        assert stream.feed(request(order, 43)) == []


@pytest.mark.parametrize("order", ORDERS)
def test_setups_are_read_and_refused_as_the_server_does(order: str) -> None:
    first = {"<": b"l", ">": b"B"}[order]
    name, cookie = b"MIT-MAGIC-COOKIE-1", bytes(range(16))
    raw = first + struct.pack(order + "xHHHHxx", 11, 0, len(name), len(cookie)) + name + b"\0\0" + cookie
    assert client_setup_length(raw[:12]) == len(raw) == 48
    assert parse_client_setup(raw) == ClientSetup(order, name, cookie, raw)  # type: ignore[arg-type]
    assert client_setup_length(b"X" + raw[1:12]) is None
    assert client_setup_length(raw[:6] + struct.pack(order + "H", 257) + raw[8:12]) is None
    with pytest.raises(ValueError):
        parse_client_setup(raw[:-4])

    refusal = setup_refusal(order, "no display granted to this client")  # type: ignore[arg-type]
    assert refusal[0] == 0 and refusal[1] == 33 and len(refusal) == server_setup_length(refusal[:8], order)
    assert refusal[8:41] == b"no display granted to this client"
    assert not parse_server_setup(refusal, order).accepted  # type: ignore[arg-type]

    accepted = struct.pack(order + "BxHHHIII", 1, 11, 0, 3, 0, AGENT_BASE, MASK)
    setup = parse_server_setup(accepted, order)  # type: ignore[arg-type]
    assert setup.accepted and setup.owns(AGENT_WINDOW) and not setup.owns(BROWSER_WINDOW)
