"""Matplotlib for the experiments' figures: headless (Agg), imported only when one is drawn."""


def pyplot():
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path, dpi: int = 110) -> None:
    """Tight layout, write ``path``, free the figure."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
