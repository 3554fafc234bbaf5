"""Errors of the core layer.

    SettingsError (ValueError)  a required setting is missing or malformed; the message names
                                every one at once (the CLI prints it and exits 2)
    ReasonedError               a failure named by one word, `reason`, with an optional detail:
                                the base of whatsapp.media.MediaError and
                                workers.transcription.TranscriptionFailed
"""


class SettingsError(ValueError):
    """A required setting is missing or malformed; the message names every one at once."""


class ReasonedError(Exception):
    """A failure named by one word (`reason`, for logs and metrics) and an optional detail
    (the message only: "reason: detail")."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
