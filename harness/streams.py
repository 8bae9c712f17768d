"""Work overlapped with the target's verification on a CUDA side stream.

``SideStream.launch`` runs a block on the side stream after everything the
main stream has queued; ``join`` makes the main stream wait for it before the
results are used. Tensors crossing between the streams are marked with
``record_stream`` so the caching allocator does not hand their memory to the
other stream while it may still be read. On other devices the block simply
runs inline and ``join`` does nothing, so the same code path is tested on CPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import torch


class SideStream:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device) if device.type == "cuda" else None
        self.pending = False

    @contextmanager
    def launch(self, inputs: Iterable[torch.Tensor]) -> Iterator[None]:
        """Run the block on the side stream; ``inputs`` are tensors from the main stream it reads or replaces."""
        if self.stream is None:
            yield
            return
        self.stream.wait_stream(torch.cuda.current_stream(self.device))
        for tensor in inputs:
            tensor.record_stream(self.stream)
        with torch.cuda.stream(self.stream):
            yield
        self.pending = True

    def join(self, outputs: Iterable[torch.Tensor]) -> None:
        """Make the main stream wait for the launched work; ``outputs`` are tensors it made that main will use."""
        if not self.pending:
            return
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        for tensor in outputs:
            tensor.record_stream(main)
        self.pending = False
