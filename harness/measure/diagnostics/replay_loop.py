"""The floor of a decoding engine on this model: greedy decoding that replays one captured step per token.

``ReplayLoop`` holds a static KV cache and the buffers of one decoding step (the newest token, its position, its
cache slot, the full-width attention mask) on the model's device, captures the step once (the target's forward,
the mask's new column, the argmax, the token written into the output buffer, the counters advanced: all on the
device) and then replays it once per token; the host reads the outputs once, at the end. Per token that is one
graph launch and nothing else: no Python per token but the replay call, no synchronisation. A real engine must
also read each token (to stop at EOS, to stream it), so ``read_each_token`` adds that one read per step: what
``measure bare-loop`` compares our ``ar`` with on a GPU. On a CPU (``capture=False``) the same step runs eagerly on
the same buffers: how the loop is tested without a GPU, and what ``measure dispatch`` counts as the floor's ops.
"""

from __future__ import annotations

from collections.abc import Generator

import torch

from harness.backend.cuda_graphs import graphed_region
from harness.backend.device import replay_of
from harness.backend.forward import forward_outputs, positions
from harness.backend.kv_cache import cache_argument
from harness.backend.models import LoadedModel
from harness.backend.static_cache import new_static_cache, static_layers
from harness.engine.runtime import static_capacity_for


class ReplayLoop:
    """Greedy decoding of up to ``max_sequence`` positions on ``lm``, one replayed step per token."""

    def __init__(self, lm: LoadedModel, max_sequence: int, capture: bool | None = None) -> None:
        self.lm = lm
        self.capture = lm.device.type == "cuda" if capture is None else capture
        device = lm.device
        self.capacity = static_capacity_for(max_sequence + 1)
        self.cache = new_static_cache(lm.model.config, self.capacity, lm.dtype, device)
        self.layers = static_layers(self.cache)
        self.token = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.position = torch.zeros((1, 1), dtype=torch.long, device=device)
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        self.written = torch.zeros(1, dtype=torch.long, device=device)  # outputs so far
        self.outputs = torch.zeros((1, self.capacity), dtype=torch.long, device=device)
        self.mask = torch.zeros((1, 1, 1, self.capacity), dtype=lm.dtype, device=device)
        self.low = torch.finfo(lm.dtype).min
        self.replay = None

    def _step(self) -> None:
        """One token, all on the device (the whole step is what is captured): its key becomes visible, the
        forward, the argmax, the buffers advance."""
        with graphed_region():
            self.mask.index_fill_(-1, self.slot, 0.0)
            for layer in self.layers:
                layer.graph_slots = self.slot
            try:
                logits = forward_outputs(self.lm, self.token, self.cache, self.position, self.mask, 1, (), 0)[0]
            finally:
                for layer in self.layers:
                    layer.graph_slots = None
            self.token.copy_(logits[:, -1:].argmax(-1))
            self.outputs.index_copy_(1, self.written, self.token)
            for counter in (self.position, self.slot, self.written):
                counter.add_(1)

    def _start(self, prompt: torch.Tensor) -> None:
        """The prompt prefilled eagerly into the static cache; the first token and the step's buffers set."""
        length = prompt.shape[-1]
        for layer in self.layers:
            layer.set_length(0)
        logits = self.lm.model(input_ids=prompt, position_ids=positions(0, length, self.lm.device), use_cache=True,
                               logits_to_keep=1, **cache_argument(self.lm.model, self.cache)).logits
        self.token.copy_(logits[:, -1:].argmax(-1))
        self.outputs[:, :1].copy_(self.token)
        self.mask.fill_(self.low)
        self.mask[..., :length] = 0
        for counter, value in ((self.position, length), (self.slot, length), (self.written, 1)):
            counter.fill_(value)

    def decode_steps(self, prompt: torch.Tensor, new_tokens: int, read_each_token: bool = False,
                     ) -> Generator[None, None, list[int]]:
        """``new_tokens`` greedy tokens after ``prompt`` (1, L), yielding between tokens (``run_interleaved``); the
        first call captures the step (on a GPU). With ``read_each_token`` the host reads every token as it comes."""
        if prompt.shape[-1] + new_tokens + 1 > self.capacity:
            raise ValueError(f"{prompt.shape[-1]} + {new_tokens} tokens do not fit the loop's {self.capacity} positions")
        with torch.inference_mode():
            self._start(prompt)
            if self.replay is None:
                self.replay = replay_of(self._step, self.lm.device, warmup=2) if self.capture else self._step
                self._start(prompt)  # the warm-up steps advanced the buffers
        for _ in range(new_tokens - 1):
            yield
            with torch.inference_mode():
                self.replay()
                if read_each_token:
                    int(self.token)  # what an engine that stops at EOS or streams must read per token
        return self.outputs[0, :new_tokens].tolist()

    def decode(self, prompt: torch.Tensor, new_tokens: int, read_each_token: bool = False) -> list[int]:
        """``decode_steps`` run through."""
        steps = self.decode_steps(prompt, new_tokens, read_each_token)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value
