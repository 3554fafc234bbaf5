"""The week's hours in the catalogue (agent/catalogue.weekly_hours_text, issue 41): consecutive
days with the same hours are one run, and the text says exactly the week it was given."""

from hypothesis import given
from hypothesis import strategies as st

from agent.catalogue import weekly_hours_text
from storage.tenant_config import WEEKDAYS

RANGES = ("09:00-12:00", "13:00-18:00", "09:00-19:30", "10:00-14:00")


def read_back(text: str) -> dict[str, str]:
    """Each weekday's hours as the text says them ("closed" or "HH:MM-HH:MM, ...")."""
    said: dict[str, str] = {}
    for run in text.split("; "):
        days, hours = run.split(" ", 1)
        first, _, last = days.partition("-")
        span = WEEKDAYS[WEEKDAYS.index(first): WEEKDAYS.index(last or first) + 1]
        assert span, f"a run from {first} back to {last}"
        for day in span:
            assert day not in said, f"{day} said twice"
            said[day] = hours
    return said


def test_a_week_of_equal_days_is_one_run_and_differing_days_are_named() -> None:
    every_day = {day: ["09:00-19:30"] for day in WEEKDAYS}
    assert weekly_hours_text(every_day) == "mon-sun 09:00-19:30"
    salon = {**{day: ["09:00-18:00"] for day in WEEKDAYS[:5]}, "sat": ["09:00-13:00"]}
    assert weekly_hours_text(salon) == "mon-fri 09:00-18:00; sat 09:00-13:00; sun closed"
    split = {"mon": ["09:00-12:00", "13:00-18:00"], "tue": [], "wed": ["09:00-12:00"]}
    assert weekly_hours_text(split) == ("mon 09:00-12:00, 13:00-18:00; tue closed; "
                                        "wed 09:00-12:00; thu-sun closed")
    assert weekly_hours_text({}) == "mon-sun closed"


@given(st.fixed_dictionaries({}, optional={
    day: st.lists(st.sampled_from(RANGES), max_size=2, unique=True) for day in WEEKDAYS}))
def test_the_text_says_every_day_as_given_in_maximal_runs(hours: dict[str, list[str]]) -> None:
    text = weekly_hours_text(hours)
    said = read_back(text)
    assert said == {day: ", ".join(hours.get(day) or []) or "closed" for day in WEEKDAYS}
    runs = [run.split(" ", 1)[1] for run in text.split("; ")]
    assert all(a != b for a, b in zip(runs, runs[1:], strict=False)), "adjacent equal runs"
