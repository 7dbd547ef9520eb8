"""The ``fast`` forms of the spectral mixers (:mod:`..forms`): the same functions as their
formulas with a cheaper backward (hand-written, adjoint transforms, self-adjoint), each a
``torch.library`` op that torch.compile keeps whole or traced whole (:mod:`.transforms`)."""
from .aff import aff_fast
from .afno import afno_fast
from .transforms import dff_fast, fnet_fast, fno_fast, gfn_fast

__all__ = ['aff_fast', 'afno_fast', 'dff_fast', 'fnet_fast', 'fno_fast', 'gfn_fast']
