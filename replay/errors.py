"""Errors of the replay runner and its doubles.

    ScenarioError (ValueError)  the scenario file itself is malformed (unknown step, bad value);
                                `wagent replay` prints it and exits 2
    GraphRefusal                a request the Graph double refuses; the double answers it with
                                Meta's error body (`code`, `message`, `details`)
"""


class ScenarioError(ValueError):
    """The scenario file itself is malformed (unknown step, bad value)."""


class GraphRefusal(Exception):
    """A request the double refuses; `_error_body` turns it into Meta's error answer."""

    def __init__(self, code: int, message: str, details: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    @property
    def http_status(self) -> int:
        return 401 if self.code == 190 else 400
