"""Target features for drafter training: hidden states of chosen layers, dumped or computed on the fly.

Layer names: 'last' is the LM-head input (the final-normed last hidden state);
an integer i is the output of decoder layer i (1-based; 0 is the embeddings).
A dump is a folder of safetensors shards plus ``index.json``; ``FeatureSource``
serves batches from a dump or computes them with the target inside the
training loop, through one interface.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm import tqdm
from transformers import PreTrainedModel

from harness.store.atomic import atomic_path
from harness.store.files import load_weights, read_json
from harness.errors import DraftcountError
from harness.data.token_streams import random_windows
from harness.backend.models import text_config

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def layer_key(layer: int | str) -> str:
    return "last" if layer == "last" else f"layer{int(layer)}"


def check_layers(model: PreTrainedModel, layers: list[int | str]) -> None:
    depth = text_config(model.config).num_hidden_layers
    for layer in layers:
        if layer != "last" and not (isinstance(layer, int) and 0 <= layer <= depth):
            raise DraftcountError(f"feature layer {layer!r} is not 'last' or an integer in 0..{depth}")


@torch.no_grad()
def target_features(model: PreTrainedModel, input_ids: torch.Tensor, layers: list[int | str]) -> dict[str, torch.Tensor]:
    """{layer key: (B, T, H) hidden states} for ``input_ids`` (B, T). Without 'last' and below the top layer, the
    forward stops at the deepest layer asked for (``early_features``): the same states for a fraction of the work."""
    early = early_features(model, input_ids, layers)
    if early is not None:
        return early
    need_all = any(layer != "last" for layer in layers)
    output = model.base_model(input_ids=input_ids, output_hidden_states=need_all)
    features = {}
    for layer in layers:
        features[layer_key(layer)] = output.last_hidden_state if layer == "last" else output.hidden_states[int(layer)]
    return features


class _StopForward(Exception):
    """Raised by a hook to end a forward once the deepest layer asked for has its input."""


def decoder_layers(model: PreTrainedModel) -> torch.nn.ModuleList | None:
    """The decoder layers of a text or vision-language target (transformers' ``get_decoder``: a vision-language
    model's language model), or None when it has no layer list."""
    layers = getattr(model.get_decoder(), "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) else None


def early_features(model: PreTrainedModel, input_ids: torch.Tensor,
                   layers: list[int | str]) -> dict[str, torch.Tensor] | None:
    """The hidden states of ``layers`` (integers only, all below the model's depth) read as the inputs of decoder
    layers 0..max(layers), the forward stopped before the deepest one runs; None when that does not apply ('last'
    or the top layer asked for, or no decoder layer list). Hidden state i is decoder layer i's input (the
    embeddings for i = 0), so these are the full forward's states, bit for bit, at max(layers) / depth of its cost."""
    decoder = decoder_layers(model)
    if decoder is None or any(layer == "last" for layer in layers):
        return None
    wanted = sorted({int(layer) for layer in layers})
    if wanted[-1] >= len(decoder):
        return None
    captured: dict[int, torch.Tensor] = {}

    def capture(index: int):
        def hook(module, args, kwargs):
            captured[index] = args[0] if args else kwargs["hidden_states"]
            if index == wanted[-1]:
                raise _StopForward
        return hook

    handles = [decoder[index].register_forward_pre_hook(capture(index), with_kwargs=True) for index in wanted]
    try:
        model.base_model(input_ids=input_ids, use_cache=False)
    except _StopForward:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return {layer_key(layer): captured[int(layer)] for layer in layers}


def dump_size_bytes(sequences: int, seq_len: int, hidden: int, layers: int, dtype: torch.dtype) -> int:
    element = torch.tensor([], dtype=dtype).element_size()  # host: an empty tensor asked its element size
    return sequences * seq_len * (hidden * layers * element + 4)


def dump_features(model: PreTrainedModel, tokens: torch.Tensor, out_dir: Path, sequences: int, seq_len: int,
                  layers: list[int | str], shard_size: int, dtype: str, seed: int, batch_size: int = 8,
                  source: str = "") -> dict:
    """Write ``sequences`` random windows of the token stream (``source``: the file it was read from, recorded)
    and their features as safetensors shards."""
    check_layers(model, layers)
    if dtype not in DTYPES:
        raise DraftcountError(f"feature dtype must be one of {list(DTYPES)}, got {dtype!r}")
    torch_dtype = DTYPES[dtype]
    size = dump_size_bytes(sequences, seq_len, text_config(model.config).hidden_size, len(layers), torch_dtype)
    print(f"feature dump: {sequences} sequences x {seq_len} tokens x {len(layers)} layers "
          f"({text_config(model.config).hidden_size} wide, {dtype}) = {size / 2**20:.1f} MiB on disk")
    out_dir.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator(device="cpu").manual_seed(seed)  # host: draws windows of the host token stream
    shards = []
    for shard_index, start in enumerate(tqdm(range(0, sequences, shard_size), desc="feature shards", unit="shard")):
        count = min(shard_size, sequences - start)
        windows = random_windows(tokens, count, seq_len, generator)
        tensors = {"input_ids": windows.to(torch.int32)}
        parts: dict[str, list[torch.Tensor]] = {}
        for batch_start in range(0, count, batch_size):
            batch = windows[batch_start : batch_start + batch_size].to(model.device)
            for key, value in target_features(model, batch, layers).items():
                parts.setdefault(key, []).append(value.to("cpu", torch_dtype))
        tensors.update({key: torch.cat(values) for key, values in parts.items()})
        name = f"shard-{shard_index:05d}.safetensors"
        with atomic_path(out_dir / name) as partial:
            save_file({key: value.contiguous() for key, value in tensors.items()}, str(partial))
        shards.append(name)
    index = {"shards": shards, "layers": [layer_key(layer) for layer in layers], "sequences": sequences,
             "seq_len": seq_len, "dtype": dtype, "hidden_size": text_config(model.config).hidden_size, "bytes": size,
             "source": source}
    (out_dir / "index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index


@dataclass
class FeatureSource:
    """Training batches of (input_ids, features): from a dump, or computed on the fly by the target."""

    layers: list[int | str]
    seq_len: int
    target: PreTrainedModel | None = None
    tokens: torch.Tensor | None = None
    dump_dir: Path | None = None

    def __post_init__(self) -> None:
        if (self.dump_dir is None) == (self.target is None or self.tokens is None):
            raise DraftcountError("a feature source needs either a dump directory or a target with its token stream")
        self._shards: list[dict[str, torch.Tensor]] = []
        if self.dump_dir is not None:
            index = read_json(Path(self.dump_dir) / "index.json", "feature dump index")
            missing = {layer_key(layer) for layer in self.layers} - set(index["layers"])
            if missing:
                raise DraftcountError(f"feature dump {self.dump_dir} lacks layers {sorted(missing)}")
            self._shards = [load_weights(Path(self.dump_dir) / name, "feature shard") for name in index["shards"]]
            self._rows = sum(shard["input_ids"].shape[0] for shard in self._shards)
            self.seq_len = min(self.seq_len, index["seq_len"])

    @property
    def shards(self) -> list[dict[str, torch.Tensor]]:
        """A dump's shards (input_ids and features of its windows); none for a token stream."""
        return self._shards

    def batch(self, batch_size: int, generator: torch.Generator, keep: slice | None = None) -> dict[str, torch.Tensor]:
        """``batch_size`` rows drawn with ``generator``; with ``keep``, only those of them (one process's share of a
        global batch: the same draws, and only the kept rows loaded or run through the target)."""
        keep = slice(None) if keep is None else keep
        if self.dump_dir is None:
            windows = random_windows(self.tokens, batch_size, self.seq_len, generator)[keep].to(self.target.device)
            return {"input_ids": windows, **target_features(self.target, windows, self.layers)}
        rows = torch.randint(0, self._rows, (batch_size,), generator=generator)[keep].tolist()  # host: row numbers
        wanted = ["input_ids", *(layer_key(layer) for layer in self.layers)]  # a dump may hold more layers than asked
        batch: dict[str, list[torch.Tensor]] = {}
        for row in rows:
            shard_index, offset = self._locate(row)
            for key in wanted:
                batch.setdefault(key, []).append(self._shards[shard_index][key][offset, : self.seq_len])
        return {key: torch.stack(values).float() if key != "input_ids" else torch.stack(values).long()
                for key, values in batch.items()}

    def _locate(self, row: int) -> tuple[int, int]:
        for index, shard in enumerate(self._shards):
            size = shard["input_ids"].shape[0]
            if row < size:
                return index, row
            row -= size
        raise IndexError(row)


# Which target hidden states feed a drafter (shared by every drafter: EAGLE heads, Lyanna drafters).


def parse_feature_layers(values: tuple[str, ...]) -> tuple[int | str, ...]:
    """Feature layer names from options: 'last' or decoder layer numbers."""
    try:
        return tuple(value if value == "last" else int(value) for value in values)
    except ValueError:
        raise DraftcountError(f"feature layers must be 'last' or integers, got {list(values)}") from None


@dataclass(frozen=True)
class FeatureSpec:
    """Which target hidden states feed a drafter: 'last' (LM-head input) or decoder layer outputs (1-based)."""

    fusion: str = "none"  # none | eagle3 | dflash (any number of layers, concatenated)
    layers: tuple[int | str, ...] = ("last",)

    def __post_init__(self) -> None:
        if self.fusion not in ("none", "eagle3", "dflash"):
            raise DraftcountError(f"feature fusion must be 'none', 'eagle3' or 'dflash', got {self.fusion!r}")
        if not self.layers:
            raise DraftcountError("a drafter needs at least one feature layer")
        if self.fusion == "none" and len(self.layers) != 1:
            raise DraftcountError("feature fusion 'none' takes exactly one feature layer")
        if self.fusion == "eagle3" and len(self.layers) != 3:
            raise DraftcountError("feature fusion 'eagle3' takes three feature layers (low, middle, high)")


def default_fusion_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low, middle and high features: the inputs of decoder layers 2, L // 2 and L - 3 (0-based, their
    ``modeling_llama_kv.py``), i.e. the outputs of layers 2, L // 2 and L - 3 in our 1-based naming. Targets under 7
    layers (test models) have no three distinct such layers and take the first, middle and last layer instead."""
    if num_layers >= 7:
        return (2, num_layers // 2, num_layers - 3)
    return (1, max(1, (num_layers + 1) // 2), num_layers)


def choose_features(fusion: str, layers: tuple[str, ...], num_layers: int) -> FeatureSpec:
    """The feature layers a trainer asked for (names from options), or the fusion's default ones."""
    if layers:
        chosen = parse_feature_layers(layers)
    else:
        chosen = ("last",) if fusion == "none" else default_fusion_layers(num_layers)
    return FeatureSpec(fusion, chosen)


def feature_indices(spec: FeatureSpec) -> tuple[int, ...]:
    """Where the chosen layers sit in a forward's hidden states (embeddings + every layer; -1: the last)."""
    return tuple(-1 if layer == "last" else int(layer) for layer in spec.layers)


def feature_rows(hidden_states: tuple[torch.Tensor | None, ...], spec: FeatureSpec) -> list[torch.Tensor]:
    """The chosen layers' states from a forward's hidden states (embeddings + every layer)."""
    return [hidden_states[index] for index in feature_indices(spec)]
