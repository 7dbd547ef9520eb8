"""Errors a user can act on: the tools print the message alone, without a traceback."""

__all__ = ['UserError', 'check_device']


class UserError(Exception):
    """Bad input (config, data, checkpoint) whose message says what is wrong and what to do."""


def check_device(device: str) -> None:
    """``--device``, refused in one line (not torch's driver error) where it names absent CUDA."""
    import torch
    if str(device).startswith('cuda') and not torch.cuda.is_available():
        raise UserError(f'--device {device}: no CUDA device is available here (use --device cpu)')

