"""What every afno_seg tool does first: silence the one known-harmless warning of the stack.

mmengine imports ``pkg_resources`` whenever a config names an installed package's base
(``mmseg::_base_/...``), and setuptools (< 81, pinned for mmcv's build and mmengine) warns at
every import.
"""
import warnings

__all__ = ['quiet_known_warnings']


def quiet_known_warnings() -> None:
    """Ignore that ``UserWarning`` (by its message) before the first ``Config.fromfile``."""
    warnings.filterwarnings('ignore', message=r'pkg_resources is deprecated as an API',
                            category=UserWarning)
