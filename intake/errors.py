"""Errors of the HTTP edge.

    StoreUnavailable   the database or Redis could not take the update: 503, Meta redelivers
"""


class StoreUnavailable(Exception):
    """The update could not be stored or its turn not enqueued; nothing was half-answered."""
