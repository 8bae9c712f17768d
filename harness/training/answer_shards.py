"""Resumable answers: the questions a chat target answers, planned as shards of whole batches and kept on disk.

``regenerate_chat`` answers the greedy part and the sampled part of its questions in order of length, a batch at
a time; ``plan_shards`` groups those batches into shards of about ``shard_size`` questions, each sampled from its
own generator (``shard_seed``), so a shard's answers do not depend on which shards ran before it in this process.
With a shard folder every finished shard is written atomically (``harness.store.atomic``) beside a manifest naming
the run (``run_key``: the rendered questions, the options, the stop tokens and the target's weights); a killed run
keeps its finished shards and a rerun with the same key answers only the others, its result equal to an
uninterrupted run's. A folder whose manifest names another run is emptied first.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel

from harness.errors import DraftcountError
from harness.store.atomic import atomic_path

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Shard:
    index: int
    temperature: float  # 0: greedy; 1: sampled at T = 1
    batches: tuple[tuple[int, ...], ...]  # question indices, a batch at a time

    @property
    def indices(self) -> list[int]:
        return [index for batch in self.batches for index in batch]


def plan_shards(lengths: list[int], greedy: int, batch_size: int, shard_size: int) -> list[Shard]:
    """The first ``greedy`` questions answered greedily, the rest sampled; each part in order of length
    (``lengths``: rendered question tokens), cut into batches of ``batch_size`` and those into shards of
    ``shard_size // batch_size`` batches (at least one)."""
    per_shard = max(1, shard_size // batch_size)
    shards: list[Shard] = []
    for indices, temperature in ((range(greedy), 0.0), (range(greedy, len(lengths)), 1.0)):
        ordered = sorted(indices, key=lambda index: (lengths[index], index))
        batches = [tuple(ordered[start:start + batch_size]) for start in range(0, len(ordered), batch_size)]
        for start in range(0, len(batches), per_shard):
            shards.append(Shard(len(shards), temperature, tuple(batches[start:start + per_shard])))
    return shards


def shard_seed(seed: int, index: int) -> int:
    """The seed of shard ``index``'s sampling generator: one per shard, whatever ran before it."""
    return (seed + 1) * 1_000_003 + index


def weights_signature(model: PreTrainedModel) -> list[float]:
    """Per-parameter sums and the config: what tells one target's weights from another's in ``run_key``."""
    with torch.no_grad():
        return [round(float(parameter.double().sum()), 6) for parameter in model.parameters()]


def run_key(questions: list[list[int]], options: object, stop_ids: frozenset[int], pad_id: int,
            model: PreTrainedModel) -> str:
    """SHA-256 of everything a shard's answers depend on."""
    payload = {"questions": questions, "options": asdict(options), "stop_ids": sorted(stop_ids), "pad_id": pad_id,
               "config": model.config.to_json_string(use_diff=False), "weights": weights_signature(model)}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode("utf-8")).hexdigest()


def shard_file(directory: Path, index: int) -> Path:
    return directory / f"shard-{index:05d}.json"


def open_shards(directory: Path, key: str) -> dict[int, dict[int, list[int]]]:
    """The finished shards in ``directory`` (shard index -> question index -> answer) when its manifest names the
    run ``key``; otherwise the folder is emptied and started for ``key``."""
    manifest = directory / MANIFEST
    if manifest.is_file() and json.loads(manifest.read_text(encoding="utf-8")).get("key") == key:
        finished = {}
        for path in sorted(directory.glob("shard-*.json")):
            record = json.loads(path.read_text(encoding="utf-8"))
            finished[int(record["shard"])] = {int(index): answer for index, answer in record["answers"]}
        return finished
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    with atomic_path(manifest) as partial:
        partial.write_text(json.dumps({"key": key}) + "\n", encoding="utf-8")
    return {}


def write_shard(directory: Path, shard: Shard, answers: dict[int, list[int]], seconds: float) -> None:
    """One finished shard, atomically: a killed run never leaves half of one."""
    if set(answers) != set(shard.indices):
        raise DraftcountError(f"shard {shard.index} holds {len(answers)} answers, {len(shard.indices)} planned")
    record = {"shard": shard.index, "temperature": shard.temperature, "seconds": round(seconds, 3),
              "answers": [[index, answers[index]] for index in shard.indices]}
    with atomic_path(shard_file(directory, shard.index)) as partial:
        partial.write_text(json.dumps(record) + "\n", encoding="utf-8")
