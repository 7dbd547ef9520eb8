"""Errors a user can act on: the tools print their message alone, without a traceback."""

__all__ = ['UserError', 'error_chain']


class UserError(Exception):
    """Bad input (config, data, checkpoint) whose message says what is wrong and what to do."""


def error_chain(error: BaseException | None):
    """``error`` and its causes (``__cause__``, else ``__context__``), each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
