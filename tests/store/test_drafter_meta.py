"""What a run records about its drafter's training data, read from the drafter's metadata without loading it."""

import json

from harness.store.drafter_meta import META_FILE, drafter_data


def test_a_feature_dump_of_the_targets_own_answers_counts_as_regenerated(tmp_path):
    for source, expected in (("work/data/tokens/regenerated.pt", "regenerated"), ("work/data/tokens/train.pt", "corpus")):
        dump = tmp_path / source.split("/")[-1] / "features"
        dump.mkdir(parents=True)
        (dump / "index.json").write_text(json.dumps({"shards": [], "source": source}))
        drafter = dump.parent / "drafter"
        drafter.mkdir()
        (drafter / META_FILE).write_text(json.dumps({"data": str(dump)}))
        assert drafter_data(drafter) == expected
    (drafter / META_FILE).write_text(json.dumps({"data": "work/data/tokens/regenerated.pt"}))
    assert drafter_data(drafter) == "regenerated" and drafter_data(None) is None
