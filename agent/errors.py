"""Errors of the agent layer (the tool loop and its tools); none reaches HTTP.

    ToolError               the model called a tool wrongly or asked for something not allowed:
                            sent back to the model as a `tool_result` with `is_error`
    ContextWindowExceeded   the model stopped with `model_context_window_exceeded`: the turn
                            retries with a smaller window (workers/turns.py)
"""


class ToolError(Exception):
    """The model called a tool wrongly or asked for something not allowed; the message is sent
    back to the model as a `tool_result` with `is_error`.
    """


class ContextWindowExceeded(Exception):
    """The model stopped with `model_context_window_exceeded`: retry with a smaller window."""
