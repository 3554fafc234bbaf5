"""Errors of the core layer.

    SettingsError (ValueError)  a required setting is missing or malformed; the message names
                                every one at once (the CLI prints it and exits 2)
"""


class SettingsError(ValueError):
    """A required setting is missing or malformed; the message names every one at once."""
