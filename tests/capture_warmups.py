"""A pytest plugin that emulates a CUDA graph capture's warm-ups on the CPU: ``PYTHONPATH=. pytest -p
tests.capture_warmups ...``.

On a GPU a graph's first call runs its body twice eagerly on a side stream before the capture, and the capture
itself runs nothing (``GraphedForwards._capture``); the replay then runs it once. A body whose result depends on what
an earlier run of it wrote (it overwrites its own inputs, or gathers within one buffer) gives the replay other inputs
than the eager path had, unless it declares what to restore (``run_block``'s ``protect``): a bug only a GPU shows, on
the first call of each graph. With this plugin every graphed forward and block run without capture
(``capture=False``, the CPU's emulation) runs its body twice more before the run whose outputs count, as a capture
does: ``protect`` saved before, restored after, and the generator it draws from put back (on a GPU the warm-ups
advance the graph generator; here the point is that the counted run finds what a single run would). Not part of the
default suite (every call runs three times): docs/testing.md.
"""

from __future__ import annotations

from harness.backend.cuda_graphs import GraphedForwards

_replay = GraphedForwards._replay


def warmed_up(self, graph, call, generator=None, protect=None):
    """``GraphedForwards._replay`` with a capture's two warm-ups run first when graphs are emulated."""
    if not self.capture:
        restore = protect() if protect is not None else None
        state = generator.get_state() if generator is not None else None
        call()
        call()
        if restore is not None:
            restore()
        if state is not None:
            generator.set_state(state)
    return _replay(self, graph, call, generator, protect)


def pytest_configure(config) -> None:
    """Installed for the whole run when loaded with ``-p tests.capture_warmups``."""
    GraphedForwards._replay = warmed_up
