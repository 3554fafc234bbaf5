"""The outbound Graph client, driven for real against the Graph API double over loopback."""

import asyncio
import contextlib
import json
import socket
import threading
import unicodedata
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from replay.graph_api import GraphDouble
from whatsapp.graph import (
    GraphAuthError,
    GraphClient,
    GraphError,
    GraphNoAnswer,
    GraphRateLimited,
    GraphTransient,
    GraphUnreachable,
    GraphWindowClosed,
    error_from_response,
    split_text,
)

FIXTURES = Path(__file__).parent / "fixtures" / "whatsapp" / "graph_api"
TOKEN = "EAAFAKE0000000000000000000000"
PHONE_NUMBER_ID = "109876543210987"
WA_ID = "5511999990001"
INBOUND_WAMID = "wamid.HBgNNTUxMTk5OTk5MDAwMRUCABIYFEZBS0UwMDAwMDAwMDAwMDAwMDAxAA=="


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / name).read_text(encoding="utf-8"))
    return loaded


@pytest.fixture
async def double() -> AsyncIterator[GraphDouble]:
    graph = GraphDouble(access_token=TOKEN)
    await graph.start()
    yield graph
    await graph.stop()


@pytest.fixture
def client(double: GraphDouble) -> Iterator[GraphClient]:
    graph_client = GraphClient(base_url=double.base_url, api_version="v25.0", access_token=TOKEN)
    yield graph_client
    graph_client.close()


async def send_text(client: GraphClient, body: str, **address: str) -> str:
    """The client is sync (RQ jobs are); run it off the loop that serves the double."""
    return await asyncio.to_thread(client.send_text, PHONE_NUMBER_ID, body=body, **address)


async def test_send_text_returns_wamid_and_double_records_the_fixture_body(
    double: GraphDouble, client: GraphClient
) -> None:
    expected = fixture("send_text_request.json")["json"]

    wamid = await send_text(client, expected["text"]["body"], to=WA_ID)

    assert wamid == "wamid.OUT000001"
    [send] = double.sends
    assert (send.phone_number_id, send.status, send.wamid, send.error_code) == (
        PHONE_NUMBER_ID, 200, wamid, None)
    assert send.body == expected


async def test_wamids_are_sequential_and_deterministic(client: GraphClient) -> None:
    first = await send_text(client, "um", to=WA_ID)
    second = await send_text(client, "dois", to=WA_ID)
    assert (first, second) == ("wamid.OUT000001", "wamid.OUT000002")


async def test_send_by_business_scoped_user_id_uses_recipient(
    double: GraphDouble, client: GraphClient
) -> None:
    await send_text(client, "Olá", recipient="BR.1234567890abcdef")

    body = double.sends[0].body
    assert body["recipient"] == "BR.1234567890abcdef"
    assert "to" not in body


async def test_double_answers_user_id_contact_for_recipient_sends(double: GraphDouble) -> None:
    body = {"messaging_product": "whatsapp", "recipient": "BR.1", "type": "text",
            "text": {"body": "oi"}}
    status, answer = await post_raw(double, body)
    assert status == 200
    assert answer["contacts"] == [{"input": "BR.1", "user_id": "BR.1"}]


async def test_quoted_reply_matches_fixture_context(
    double: GraphDouble, client: GraphClient
) -> None:
    expected = fixture("send_text_quoted_reply_request.json")["json"]
    await asyncio.to_thread(
        client.send_text, PHONE_NUMBER_ID, body=expected["text"]["body"], to=WA_ID,
        reply_to=expected["context"]["message_id"],
    )
    assert double.sends[0].body["context"] == expected["context"]


async def test_send_template_matches_fixture_and_is_accepted(
    double: GraphDouble, client: GraphClient
) -> None:
    expected = fixture("send_template_request.json")["json"]
    template = expected["template"]
    wamid = await asyncio.to_thread(
        client.send_template, PHONE_NUMBER_ID, name=template["name"],
        language=template["language"]["code"], to=WA_ID, components=template["components"],
    )
    assert wamid == "wamid.OUT000001"
    assert double.sends[0].body == expected


def test_exactly_one_address_is_required(client: GraphClient) -> None:
    with pytest.raises(ValueError):
        client.send_text(PHONE_NUMBER_ID, body="oi")
    with pytest.raises(ValueError):
        client.send_text(PHONE_NUMBER_ID, body="oi", to=WA_ID, recipient="BR.1")


def test_client_refuses_over_long_text_before_sending(client: GraphClient) -> None:
    with pytest.raises(ValueError):
        client.send_text(PHONE_NUMBER_ID, body="x" * 4097, to=WA_ID)


@pytest.mark.parametrize(("typing", "fixture_name"), [
    (False, "mark_read_request.json"), (True, "typing_indicator_request.json")])
async def test_mark_read_goes_to_reads_not_sends(
    double: GraphDouble, client: GraphClient, typing: bool, fixture_name: str
) -> None:
    await asyncio.to_thread(client.mark_read, PHONE_NUMBER_ID, INBOUND_WAMID, typing=typing)

    assert double.reads == [fixture(fixture_name)["json"]]
    assert double.sends == []


async def test_mark_read_does_not_use_up_an_injected_failure(
    double: GraphDouble, client: GraphClient
) -> None:
    double.fail(130429)
    await asyncio.to_thread(client.mark_read, PHONE_NUMBER_ID, INBOUND_WAMID)
    with pytest.raises(GraphRateLimited):
        await send_text(client, "oi", to=WA_ID)


@pytest.mark.parametrize(("code", "error_class", "http_status"), [
    (130429, GraphRateLimited, 400),
    (131056, GraphRateLimited, 400),
    (131047, GraphWindowClosed, 400),
    (190, GraphAuthError, 401),
    (131026, GraphError, 400),
])
async def test_injected_failure_raises_typed_error_and_is_recorded(
    double: GraphDouble, client: GraphClient, code: int, error_class: type[GraphError],
    http_status: int,
) -> None:
    double.fail(code)

    with pytest.raises(error_class) as raised:
        await send_text(client, "oi", to=WA_ID)

    assert type(raised.value) is error_class
    assert (raised.value.code, raised.value.http_status) == (code, http_status)
    assert raised.value.fbtrace_id
    assert [(s.status, s.error_code, s.wamid) for s in double.sends] == [
        (http_status, code, None)]


async def test_rate_limit_is_retryable_and_window_closed_is_not(
    double: GraphDouble, client: GraphClient
) -> None:
    double.fail(130429)
    double.fail(131047)
    with pytest.raises(GraphRateLimited) as rate_limited:
        await send_text(client, "oi", to=WA_ID)
    with pytest.raises(GraphWindowClosed) as window_closed:
        await send_text(client, "oi", to=WA_ID)
    assert rate_limited.value.title == "Rate limit hit"
    assert rate_limited.value.details == "Cloud API message throughput has been reached."
    assert rate_limited.value.retryable and not window_closed.value.retryable


async def test_failure_times_then_success(double: GraphDouble, client: GraphClient) -> None:
    double.fail(131056, times=2)
    for _ in range(2):
        with pytest.raises(GraphRateLimited):
            await send_text(client, "oi", to=WA_ID)
    assert await send_text(client, "oi", to=WA_ID) == "wamid.OUT000001"
    assert [s.status for s in double.sends] == [400, 400, 200]
    assert [s.wamid for s in double.accepted] == ["wamid.OUT000001"]


async def test_wrong_token_is_refused_with_190(double: GraphDouble) -> None:
    wrong = GraphClient(base_url=double.base_url, api_version="v25.0", access_token="nope")
    with pytest.raises(GraphAuthError) as raised:
        await send_text(wrong, "oi", to=WA_ID)
    wrong.close()
    assert (raised.value.code, raised.value.http_status) == (190, 401)
    assert not raised.value.retryable


async def post_raw(double: GraphDouble, body: object) -> tuple[int, dict[str, Any]]:
    def post() -> tuple[int, dict[str, Any]]:
        response = httpx2.post(
            f"{double.base_url}/v25.0/{PHONE_NUMBER_ID}/messages", json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        return response.status_code, response.json()

    return await asyncio.to_thread(post)


async def test_double_refuses_a_5000_character_text_with_code_100(double: GraphDouble) -> None:
    body = fixture("send_text_request.json")["json"]
    body["text"]["body"] = "x" * 5000

    status, answer = await post_raw(double, body)

    assert status == 400
    assert answer["error"]["code"] == 100
    assert answer["error"]["message"] == fixture("error_100_text_too_long.json")["json"]["error"][
        "message"]
    assert [(s.status, s.error_code) for s in double.sends] == [(400, 100)]


@pytest.mark.parametrize("mutate", [
    lambda b: b.pop("messaging_product"),
    lambda b: b.pop("type"),
    lambda b: b.update(recipient="BR.1"),
    lambda b: b.pop("to"),
    lambda b: b.update(colour="blue"),
    lambda b: b["text"].update(body=""),
    lambda b: b["text"].update(bold=True),
    lambda b: b.update(type="carrier_pigeon"),
])
async def test_double_refuses_malformed_sends_with_code_100(
    double: GraphDouble, mutate: Any
) -> None:
    body = fixture("send_text_request.json")["json"]
    mutate(body)
    status, answer = await post_raw(double, body)
    assert (status, answer["error"]["code"]) == (400, 100)


async def test_double_accepts_the_interactive_fixtures(double: GraphDouble) -> None:
    for name in ("send_interactive_buttons_request.json", "send_interactive_list_request.json"):
        status, _ = await post_raw(double, fixture(name)["json"])
        assert status == 200


async def test_a_refused_connection_is_unreachable_and_names_its_cause(
        double: GraphDouble, client: GraphClient) -> None:
    await double.go_down()
    with pytest.raises(GraphUnreachable) as raised:
        await send_text(client, "oi", to=WA_ID)
    assert isinstance(raised.value, GraphTransient) and raised.value.retryable
    assert (raised.value.code, raised.value.cause, raised.value.http_status) == (
        None, "refused", 0)
    assert double.sends == []
    await double.go_up()
    assert await send_text(client, "oi", to=WA_ID) == "wamid.OUT000001"


async def test_a_dns_failure_is_unreachable_with_cause_dns() -> None:
    def no_such_name(request: httpx2.Request) -> httpx2.Response:  # as httpx2 reports it
        try:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        except socket.gaierror as exc:
            raise httpx2.ConnectError(str(exc), request=request) from exc

    client = GraphClient(base_url="https://graph.example.invalid", api_version="v25.0",
                         access_token=TOKEN, timeout=2,
                         http_client=httpx2.Client(transport=httpx2.MockTransport(no_such_name)))
    with pytest.raises(GraphUnreachable) as raised:
        await send_text(client, "oi", to=WA_ID)
    client.close()
    assert raised.value.cause == "dns"


async def test_a_tls_handshake_failure_is_unreachable_with_cause_tls(
        double: GraphDouble) -> None:
    """https:// to a server that speaks plain HTTP: the handshake fails before any request."""
    client = GraphClient(base_url=double.base_url.replace("http://", "https://"),
                         api_version="v25.0", access_token=TOKEN, timeout=2)
    with pytest.raises(GraphUnreachable) as raised:
        await send_text(client, "oi", to=WA_ID)
    client.close()
    assert raised.value.cause == "tls"
    assert double.sends == []


@contextlib.contextmanager
def silent_server(*, read_request: bool) -> Iterator[int]:
    """A TCP server on loopback that accepts and then never answers (it reads what comes when
    `read_request`); yields its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            held.append(connection)
            if read_request:
                connection.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for connection in held:
            connection.close()
        server.close()


async def test_a_tls_handshake_that_never_ends_is_a_connect_timeout_and_unreachable() -> None:
    with silent_server(read_request=False) as port:
        client = GraphClient(base_url=f"https://127.0.0.1:{port}", api_version="v25.0",
                             access_token=TOKEN, timeout=0.5)
        with pytest.raises(GraphUnreachable) as raised:
            await send_text(client, "oi", to=WA_ID)
        client.close()
    assert raised.value.cause == "timeout"


async def test_no_answer_after_the_request_was_written_is_no_answer_never_unreachable() -> None:
    with silent_server(read_request=True) as port:
        client = GraphClient(base_url=f"http://127.0.0.1:{port}", api_version="v25.0",
                             access_token=TOKEN, timeout=0.5)
        with pytest.raises(GraphNoAnswer) as raised:
            await send_text(client, "oi", to=WA_ID)
        client.close()
    assert not isinstance(raised.value, GraphTransient) and not raised.value.retryable
    assert raised.value.cause == "timeout"


async def test_a_connection_dropped_after_meta_took_the_send_is_no_answer(
        double: GraphDouble, client: GraphClient) -> None:
    double.drop()
    with pytest.raises(GraphNoAnswer) as raised:
        await send_text(client, "oi", to=WA_ID)
    assert raised.value.cause == "closed"
    assert [s.wamid for s in double.accepted] == ["wamid.OUT000001"], "Meta took it"
    assert await send_text(client, "de novo", to=WA_ID) == "wamid.OUT000002"


@pytest.mark.parametrize(("name", "error_class", "code"), [
    ("error_100_text_too_long.json", GraphError, 100),
    ("error_130429_throughput.json", GraphRateLimited, 130429),
    ("error_190_token_expired.json", GraphAuthError, 190),
])
def test_error_from_response_classifies_fixture_errors(
    name: str, error_class: type[GraphError], code: int
) -> None:
    recorded = fixture(name)
    error = error_from_response(recorded["status"], recorded["json"])
    assert type(error) is error_class
    assert error.code == code
    assert error.fbtrace_id == recorded["json"]["error"]["fbtrace_id"]


def test_every_error_fixture_is_covered() -> None:
    names = {path.name for path in FIXTURES.glob("error_*.json")}
    assert names == {"error_100_text_too_long.json", "error_130429_throughput.json",
                     "error_190_token_expired.json"}


@pytest.mark.parametrize(("status", "body", "error_class", "retryable"), [
    (400, {"error": {"code": 131000, "message": "(#131000) Something went wrong"}},
     GraphTransient, True),
    (500, {"error": {"code": 131047, "message": "(#131047) Re-engagement message"}},
     GraphWindowClosed, False),
    (400, {"error": {"code": 4, "message": "(#4) Application request limit reached"}},
     GraphRateLimited, True),
    (400, {"error": {"code": 80007}}, GraphRateLimited, True),
    (401, {"error": {"code": 0}}, GraphAuthError, False),
    (500, {"error": {"code": 1, "message": "An unknown error occurred", "is_transient": True}},
     GraphTransient, True),
    (503, None, GraphNoAnswer, False),
    (502, "<html>bad gateway</html>", GraphNoAnswer, False),
    (504, {"detail": "upstream timed out"}, GraphNoAnswer, False),
    (429, None, GraphError, False),
    (400, {"error": {"code": 131026, "message": "(#131026) Message undeliverable"}},
     GraphError, False),
    (400, {"error": {"code": 999999, "is_transient": True}}, GraphError, True),
])
def test_error_from_response_goes_by_code_not_http_status(
    status: int, body: object, error_class: type[GraphError], retryable: bool
) -> None:
    error = error_from_response(status, body)
    assert type(error) is error_class
    assert error.retryable is retryable


# --- split_text -----------------------------------------------------------------------------

def utf16_len(text: str) -> int:
    """UTF-16 code units, counted here on its own (not with the product's helper)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


EXTENDER_RANGES = ((0xFE00, 0xFE0F), (0x1F3FB, 0x1F3FF), (0x200D, 0x200D))


def extends_previous(ch: str) -> bool:
    """Combining mark, variation selector, skin tone modifier or ZWJ."""
    return unicodedata.category(ch) in ("Mn", "Mc", "Me") or any(
        lo <= ord(ch) <= hi for lo, hi in EXTENDER_RANGES)


def non_space(text: str) -> str:
    return "".join(text.split())


CLUSTERS = ["e\u0301", "a\u0300\u0323", "👍🏽", "👨\u200d👩\u200d👧", "❤️", "1️⃣", "🇧🇷", "🇵🇹",
            "🏳️\u200d🌈", "क्षि", "\u1112\u1161\u11ab"]
TOKENS = st.one_of(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzçãé", min_size=1, max_size=12),
    st.sampled_from(CLUSTERS),
    st.sampled_from([" ", "  ", "\n", "\n\n", ". ", "! ", "? ", ", ", "\t", "\u0301"]),
)
REALISTIC_TEXT = st.lists(TOKENS, max_size=400).map("".join)
LIMITS = st.integers(min_value=40, max_value=600)


@given(text=st.text(max_size=3000), limit=st.integers(min_value=2, max_value=5000))
def test_split_text_parts_fit_and_keep_all_content(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(0 < utf16_len(part) <= limit for part in parts)
    assert all(part == part.strip() for part in parts)
    assert non_space("".join(parts)) == non_space(text)


def longest_extender_run(text: str) -> int:
    longest = run = 0
    for ch in text:
        run = run + 1 if extends_previous(ch) or ch.isspace() else 0
        longest = max(longest, run)
    return longest


@given(text=REALISTIC_TEXT, limit=LIMITS)
def test_split_text_never_starts_a_part_inside_a_cluster(text: str, limit: int) -> None:
    assume(longest_extender_run(text) < limit // 2)  # else no cut can keep every cluster whole
    parts = split_text(text, limit)
    assert all(0 < utf16_len(part) <= limit for part in parts)
    assert non_space("".join(parts)) == non_space(text)
    for index, part in enumerate(parts):
        orphan_at_start = index == 0 and extends_previous(text.lstrip()[0])
        assert orphan_at_start or not extends_previous(part[0])
        assert not part.endswith("\u200d")
        assert sum(0x1F1E6 <= ord(ch) <= 0x1F1FF for ch in part) % 2 == 0  # flags stay whole


def test_split_text_prefers_paragraphs_then_lines_then_sentences_then_spaces() -> None:
    # limit 120 → parts of at most 90; limit 80 → at most 60 (a quarter kept as margin)
    assert split_text("x" * 50 + "\n\n" + "y" * 10 + "\n" + "z" * 40, limit=120) == [
        "x" * 50, "y" * 10 + "\n" + "z" * 40]
    assert split_text("a" * 50 + "\n" + "b" * 20 + ". " + "c" * 40, limit=120) == [
        "a" * 50, "b" * 20 + ". " + "c" * 40]
    assert split_text("Oi, tudo bem? " + "c" * 29 + ". " + "d" * 30, limit=80) == [
        "Oi, tudo bem? " + "c" * 29 + ".", "d" * 30]
    assert split_text("a" * 50 + " " + "b" * 50, limit=80) == ["a" * 50, "b" * 50]


def test_split_text_takes_the_last_boundary_when_the_best_kind_comes_too_early() -> None:
    # An early paragraph or sentence end would make a short first part and one more message:
    # the last boundary of the best kind that fills half a part wins (limit 80 → parts ≤ 60).
    assert split_text("Oi!\n\n" + "c" * 29 + ". " + "d" * 30, limit=80) == [
        "Oi!\n\n" + "c" * 29 + ".", "d" * 30]
    assert split_text("Oi! " + "c" * 39 + " " + "d" * 30, limit=80) == [
        "Oi! " + "c" * 39, "d" * 30]
    # Nothing late enough: the last boundary of any kind, not the first one.
    assert split_text("Oi! " + "c" * 20 + " " + "d" * 70, limit=80)[0] == "Oi! " + "c" * 20


def test_split_text_keeps_margin_below_metas_limit() -> None:
    parts = split_text(("palavra " * 1200).strip())
    assert all(len(part) <= 4096 - 96 for part in parts)
    assert len(parts) == 3


def test_split_text_hard_splits_without_breaking_an_emoji() -> None:
    family = "👨\u200d👩\u200d👧"
    parts = split_text(family * 30, limit=40)
    assert all(part.count(family) * len(family) == len(part) for part in parts)


def test_split_text_short_and_blank_inputs() -> None:
    assert split_text("  Olá!  ") == ["Olá!"]
    assert split_text(" \n\n ") == []
    with pytest.raises(ValueError):
        split_text("👍", limit=1)


def emoji_heavy(length: int) -> str:
    """`length` code points of short Portuguese sentences full of emoji (2 UTF-16 units
    each, flags and ZWJ families more)."""
    pieces = ["Oi! 😀😀 ", "Tem horário 👍🏽 amanhã? ", "🇧🇷🇧🇷 ", "Família 👨\u200d👩\u200d👧 ",
              "Corte ✂️ e escova 💇\u200d♀️💇\u200d♀️. "]
    text, n = "", 0
    while len(text) < length:
        text, n = text + pieces[n % len(pieces)], n + 1
    return text[:length].rstrip("\u200d")


def test_a_3999_character_emoji_heavy_reply_is_split_within_4096_utf16_units() -> None:
    reply = emoji_heavy(3999)
    assert len(reply) == 3999 and utf16_len(reply) > 4096  # one part by code points, too long
    parts = split_text(reply)
    assert len(parts) == 2
    assert all(utf16_len(part) <= 4096 - 96 for part in parts)
    assert non_space("".join(parts)) == non_space(reply)


def test_an_emoji_heavy_reply_that_greets_first_is_split_in_two_not_three() -> None:
    # Issue 35: the first sentence end ("Oi!") was taken over the last one that fits.
    for greeting in ("Oi!\n\n", "Oi! ", "Oi!\n"):
        reply = greeting + emoji_heavy(3999 - len(greeting))
        assert utf16_len(reply) <= 2 * (4096 - 96)
        parts = split_text(reply)
        assert len(parts) == 2, [utf16_len(part) for part in parts]
        assert non_space("".join(parts)) == non_space(reply)


WORDS = st.lists(st.one_of(
    st.text(alphabet="abcdefghijçãé", min_size=1, max_size=8),
    st.sampled_from(["😀", "👍🏽", "🇧🇷", "💇\u200d♀️", "Oi!", "bem?", "fim."])),
    min_size=1, max_size=300)
GAPS = st.sampled_from([" ", " ", " ", "\n", "\n\n", ". ", "! "])


@given(words=WORDS, gaps=st.lists(GAPS, min_size=300, max_size=300), limit=LIMITS)
def test_split_text_every_part_but_the_last_fills_half_a_part(
        words: list[str], gaps: list[str], limit: int) -> None:
    # Words are at most 8 characters (16 units): a good boundary always falls in the second
    # half of a part, so no part but the last is short, whatever the paragraphs and emoji.
    text = "".join(word + gap for word, gap in zip(words, gaps, strict=False))
    budget = limit - min(96, limit // 4)
    parts = split_text(text, limit)
    assert non_space("".join(parts)) == non_space(text)
    assert all(utf16_len(part) <= budget for part in parts)
    assert all(utf16_len(part) >= budget // 2 - 20 for part in parts[:-1])


async def test_double_counts_utf16_units_an_emoji_is_two(double: GraphDouble) -> None:
    body = fixture("send_text_request.json")["json"]
    body["text"]["body"] = "😀" * 2048  # 2,048 characters, 4,096 units: the most Meta takes
    assert (await post_raw(double, body))[0] == 200
    body["text"]["body"] = "😀" * 2048 + "!"
    status, answer = await post_raw(double, body)
    assert (status, answer["error"]["code"]) == (400, 100)


def test_client_refuses_a_body_over_4096_utf16_units_before_sending(
        client: GraphClient) -> None:
    with pytest.raises(ValueError, match="UTF-16"):
        client.send_text(PHONE_NUMBER_ID, body="😀" * 2049, to=WA_ID)
