"""Small instances of every registered mixer for the test suites, from each class's declared
``example_args`` and ``extra_examples`` (declared on the class, so a new mixer file is covered
by every suite without editing one)."""
import copy

import torch

from afno_seg.mixers import mixer_classes
from afno_seg.mixers.catalogue import declared

#: Channels of the tokens the examples are built for (every example divides it).
EXAMPLE_EMBED_DIMS = 16


def example_cases() -> list[tuple[str, type, dict]]:
    """``(case id, class, kwargs)`` for every mixer: its ``example_args``, then each of its
    ``extra_examples`` (id ``ClassName-suffix``); kwargs include ``embed_dims``."""
    cases = []
    for cls in mixer_classes():
        examples = {'': declared(cls, 'example_args'), **declared(cls, 'extra_examples')}
        for suffix, args in examples.items():
            kwargs = dict(embed_dims=EXAMPLE_EMBED_DIMS, **copy.deepcopy(args))
            cases.append((cls.__name__ + (f'-{suffix}' if suffix else ''), cls, kwargs))
    return cases


def example_configs() -> dict[str, dict]:
    """Case id -> mixer config without ``embed_dims`` (the backbone fills in each stage's)."""
    return {case_id: dict(type=cls.__name__, **{k: v for k, v in kwargs.items()
                                                if k != 'embed_dims'})
            for case_id, cls, kwargs in example_cases()}


#: Gain on AFNO's parameters (default std 0.02) that makes its spectral branch about half of its
#: output: with the defaults the branch is ~1% beside the residual ``+ x``, so a low-precision
#: test with a tolerance of a few per cent would pass a forward that returned ``x`` alone.
AFNO_GAIN = 25.0


#: Gain on MSCA's output projection ``proj_2``: with torch's default initialisation its branch
#: is 5-13% beside its internal residual ``+ x`` (C = 512 ... 16); times 10 it is 40-80%.
MSCA_GAIN = 10.0


def o1_branch(mixer):
    """``mixer`` with AFNO's (and AFF's: the same MLP, the same residual) weights scaled by
    :data:`AFNO_GAIN`, MSCA's ``proj_2`` by :data:`MSCA_GAIN` (other mixers unchanged: they
    have no residual, or their output is all branch)."""
    from afno_seg.mixers import AFFMixer, AFNOMixer, MSCAMixer
    with torch.no_grad():
        if isinstance(mixer, (AFFMixer, AFNOMixer)):
            for param in mixer.parameters():
                param.mul_(AFNO_GAIN)
        elif isinstance(mixer, MSCAMixer):
            for param in mixer.proj_2.parameters():
                param.mul_(MSCA_GAIN)
    return mixer


def relative_error(out, reference) -> float:
    """Relative L2 error of ``out`` against ``reference`` (in float32)."""
    return float((out.float() - reference.float()).norm() / reference.float().norm())
