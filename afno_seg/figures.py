"""Every figure of the package: a matplotlib ``Figure`` without pyplot (no GUI backend, no global
state to close), matplotlib imported only when one is drawn."""


def new_figure(*grid: int, figsize: tuple[float, float], **kwargs):
    """A tight-layout figure of ``figsize`` inches and its ``subplots(*grid, **kwargs)``."""
    from matplotlib.figure import Figure
    figure = Figure(figsize=figsize, layout='tight')
    return figure, figure.subplots(*grid, **kwargs)
