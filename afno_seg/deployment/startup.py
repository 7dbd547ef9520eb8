"""What every afno_seg tool does first: silence the one known-harmless warning of the stack.

mmengine imports (and re-imports) ``pkg_resources`` whenever a config names an installed
package's base (``mmseg::_base_/...``: ``is_installed``/``get_installed_path``), and setuptools
(< 81, pinned because mmcv's build and mmengine still need it) warns with a ``UserWarning`` at
every import: twice per tool run. Only that warning is filtered, by its message; everything else
still shows.
"""
import warnings

__all__ = ['quiet_known_warnings']

PKG_RESOURCES_DEPRECATION = r'pkg_resources is deprecated as an API'


def quiet_known_warnings() -> None:
    """Ignore setuptools' ``pkg_resources is deprecated`` ``UserWarning`` (and nothing else).

    Call it before the first ``Config.fromfile`` (where mmengine imports ``pkg_resources``).
    """
    warnings.filterwarnings('ignore', message=PKG_RESOURCES_DEPRECATION, category=UserWarning)
