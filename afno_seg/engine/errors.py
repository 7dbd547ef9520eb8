"""Errors a user can act on: the tools print their message alone, without a traceback."""

__all__ = ['UserError']


class UserError(Exception):
    """Bad input (config, data, checkpoint) whose message says what is wrong and what to do."""
