"""Token mixers: one module per method, all following :class:`~afno_seg.mixers.base.TokenMixer`."""
from .afno import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .axial import *  # noqa: F401,F403
from .base import TokenMixer  # noqa: F401
from .fnet import *  # noqa: F401,F403
from .fno import *  # noqa: F401,F403
from .gfn import *  # noqa: F401,F403
