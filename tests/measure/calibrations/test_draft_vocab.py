"""The draft-vocabulary benchmark's token stream (``harness.measure.calibrations.draft_vocab``): Zipf-distributed over a
seeded order of the vocabulary, the same for a seed, so the maps chosen from it are the same every run."""

import torch

from harness.measure.calibrations.draft_vocab import zipf_stream


def test_the_stream_is_zipf_over_a_seeded_order():
    stream = zipf_stream(1000, 20_000, seed=3)
    assert torch.equal(stream, zipf_stream(1000, 20_000, seed=3)) and not torch.equal(stream, zipf_stream(1000, 20_000))
    assert stream.dtype == torch.int32 and 0 <= int(stream.min()) and int(stream.max()) < 1000
    counts = torch.bincount(stream.long(), minlength=1000).sort(descending=True).values.double()
    assert 1.6 < float(counts[0] / counts[1]) < 2.5 and float(counts[:100].sum() / counts.sum()) > 0.6  # 1/r
