"""Errors a user can act on: the tools print their message alone, without a traceback."""

__all__ = ['UserError', 'check_device', 'error_chain']


class UserError(Exception):
    """Bad input (config, data, checkpoint) whose message says what is wrong and what to do."""


def check_device(device: str) -> str:
    """``device`` (``--device`` of every tool that takes one) when this machine has it: a CUDA
    device without CUDA is one line here, not torch's driver error from the first tensor moved."""
    import torch
    if str(device).startswith('cuda') and not torch.cuda.is_available():
        raise UserError(f'--device {device}: no CUDA device is available here (use --device cpu)')
    return device


def error_chain(error: BaseException | None):
    """``error`` and its causes (``__cause__``, else ``__context__``), each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
