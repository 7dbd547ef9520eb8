"""Which form of a mixer runs: one context switch for the whole package.

A mixer module is its formula in plain torch, ``formula(x, hw_shape)``. It may declare other
forms of the same function in its class's ``forms`` (form name -> ``fn(mixer, x, hw_shape)``),
each tested equal to the formula in float64, forward and gradients
(``tests/test_mixer_contract.py``, ``docs/adding_a_mixer.md``):

============= ==================================================================================
``fast``      training and inference (the default): hand-written backward, adjoint FFTs
              (:mod:`.fast`)
``reference`` the formula itself, ``torch.fft`` with torch's autograd (benchmarks, tests)
``op``        ONNX export with its ``DFT`` operator: no complex matmul (:mod:`.export`)
``matmul``    ONNX export with the DFT as real matmuls: no complex tensor (:mod:`.export`)
============= ==================================================================================

A form a mixer does not declare runs its formula. The switch is a ContextVar, as
``engine/runner.py``'s, so threads and nested contexts see their own; inside ``torch.onnx.export``
with none set, ``op``. This module and :mod:`.export` are the only ones that know about export.
"""
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import partial

import torch
from torch import Tensor

__all__ = ['FORMS', 'current_form', 'declared_forms', 'select', 'use_form']

FORMS = ('fast', 'reference', 'op', 'matmul')
_FORM: ContextVar[str | None] = ContextVar('afno_seg_mixer_form', default=None)


@contextmanager
def use_form(form: str) -> Iterator[None]:
    """Within this context every mixer runs ``form`` (one of :data:`FORMS`)."""
    if form not in FORMS:
        raise ValueError(f'mixer form must be one of {", ".join(FORMS)}, got {form!r}')
    token = _FORM.set(form)
    try:
        yield
    finally:
        _FORM.reset(token)


def current_form() -> str:
    """The innermost :func:`use_form` in effect; else ``'op'`` during an ONNX export, else
    ``'fast'``."""
    form = _FORM.get()
    if form is None:
        return 'op' if torch.onnx.is_in_onnx_export() else 'fast'
    return form


def declared_forms(cls: type) -> dict[str, Callable]:
    """The forms ``cls`` declares besides its formula (``reference``)."""
    return dict(getattr(cls, 'forms', {}))


def select(mixer) -> Callable[[Tensor, tuple[int, int]], Tensor]:
    """``mixer``'s form in effect, as ``fn(x, hw_shape)``."""
    fn = declared_forms(type(mixer)).get(current_form())
    return mixer.formula if fn is None else partial(fn, mixer)
