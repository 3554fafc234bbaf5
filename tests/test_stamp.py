"""The received-time stamp: written by `intake.stamp.stamp`, read back by `unstamp` only (the
console's transcript and fact extraction's length both go through it)."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from intake.stamp import stamp, unstamp
from storage.models import Message
from workers.facts import customer_text_length

RECEIVED = datetime(2026, 6, 1, 13, 0, tzinfo=UTC)  # 10:00 in São Paulo


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"),
               max_size=40),
       st.sampled_from([None, timedelta(hours=2), timedelta(days=3)]))
def test_unstamp_gives_back_what_the_customer_wrote(text: str, late: timedelta | None) -> None:
    sent_at = None if late is None else RECEIVED - late
    assert unstamp(stamp(text, RECEIVED, "America/Sao_Paulo", sent_at=sent_at)) == text


def test_unstamp_takes_one_stamp_per_line_and_leaves_other_brackets() -> None:
    first = stamp("quero marcar", RECEIVED, "America/Sao_Paulo")
    second = stamp("às 15h] ok", RECEIVED + timedelta(minutes=1), "America/Sao_Paulo")
    assert unstamp(f"{first}\n{second}") == "quero marcar\nàs 15h] ok"
    assert unstamp("[nota] oi") == "[nota] oi", "a customer's own brackets are not a stamp"
    assert unstamp("oi [Mon 2026-06-01 10:00] x") == "oi [Mon 2026-06-01 10:00] x"


def test_customer_text_length_counts_the_words_after_the_stamp_only() -> None:
    texts = [stamp("oi", RECEIVED, "America/Sao_Paulo"), "[nota] sem carimbo"]
    rows = [Message(tenant_id=1, conversation_id=1, role="user", direction="inbound",
                    content=[{"type": "text", "text": t}], received_at=RECEIVED) for t in texts]
    assert customer_text_length(rows) == len("oi") + len("[nota] sem carimbo")
