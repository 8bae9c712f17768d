"""The answers' resumable shards: whole batches in order of length, greedy first; a manifest naming the run."""

from __future__ import annotations

import json

from harness.training.answer_shards import (
    open_shards,
    plan_shards,
    shard_file,
    shard_seed,
    write_shard,
)


def test_shards_are_whole_batches_in_order_of_length_greedy_part_first():
    lengths = [5, 3, 9, 1, 7, 2, 8]
    shards = plan_shards(lengths, greedy=3, batch_size=2, shard_size=4)
    assert [(shard.temperature, shard.batches) for shard in shards] == [
        (0.0, ((1, 0), (2,))),  # greedy: questions 0-2 by length
        (1.0, ((3, 5), (4, 6))),  # sampled: 3-6 by length, two batches a shard
    ]
    assert [shard.index for shard in shards] == [0, 1]
    assert sorted(index for shard in shards for index in shard.indices) == list(range(7))
    assert len(plan_shards(lengths, greedy=0, batch_size=4, shard_size=1)) == 2  # at least one batch a shard
    assert len({shard_seed(0, index) for index in range(100)} | {shard_seed(1, index) for index in range(100)}) == 200


def test_a_manifest_of_another_run_empties_the_folder(tmp_path):
    shards = plan_shards([1, 2], greedy=2, batch_size=1, shard_size=1)
    assert open_shards(tmp_path / "s", "run-a") == {}
    write_shard(tmp_path / "s", shards[0], {0: [4, 5]}, seconds=0.5)
    assert open_shards(tmp_path / "s", "run-a") == {0: {0: [4, 5]}}
    assert json.loads(shard_file(tmp_path / "s", 0).read_text())["temperature"] == 0.0
    assert open_shards(tmp_path / "s", "run-b") == {} and not shard_file(tmp_path / "s", 0).exists()
