"""Errors of the storage layer. Callers import them from here (the modules that raise them
re-export them for older imports); bot/errors.py maps those that reach HTTP.

    TenantConfigError (ValueError)  a tenant configuration that cannot be applied; `problems`
                                    lists each as "where: what" (admin API 422 via operations)
    CatalogueConflict               a catalogue change that would strand upcoming appointments
                                    (admin API 409 via operations)
    TurnFenced                      the running turn lost its conversation's fence
                                    (storage/fences.py); never reaches HTTP
"""


class TenantConfigError(ValueError):
    """A tenant configuration that cannot be applied. `problems`: each problem as "where: what",
    in order, the list callers show (the admin API's `problems`, the console's lines); the
    message is them joined by "; ", for logs and the CLI."""

    def __init__(self, *problems: str) -> None:
        super().__init__("; ".join(problems))
        self.problems = list(problems)


class CatalogueConflict(Exception):
    """A change that would leave upcoming appointments without their service or professional."""


class TurnFenced(Exception):
    """The running turn's fence is no longer the conversation's latest: another turn took the
    conversation's lock. Nothing of the transaction that raised it was written."""
