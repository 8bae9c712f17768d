"""Long-context prompts: each bucket's prompts hit their token length within the tolerance, are deterministic for
a seed, load as a prompt set with the bucket as category, and bad buckets are one-line errors."""

import json

import pytest

from harness.data.corpus import Document, stdlib_root
from harness.data.long_context import check_buckets, make_long_prompts, token_count, write_long_prompts
from harness.data.prompts import load_prompts
from harness.errors import DraftcountError
from tests.helpers import build_tokenizer

FILES = ["textwrap.py", "shlex.py", "fnmatch.py", "bisect.py", "glob.py", "calendar.py", "pprint.py"]


@pytest.fixture(scope="module")
def documents():
    return [Document(name, (stdlib_root() / name).read_text(encoding="utf-8")) for name in FILES]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def test_buckets_hit_their_lengths_and_are_deterministic(documents, tokenizer):
    prompts = make_long_prompts(documents, tokenizer, [512, 64, 192], per_bucket=3, seed=1, tolerance=0.1)
    assert [prompt["category"] for prompt in prompts] == ["ctx64"] * 3 + ["ctx192"] * 3 + ["ctx512"] * 3
    for prompt in prompts:
        assert prompt["prompt_tokens"] == token_count(tokenizer, prompt["prompt"])
        assert 0.9 * prompt["bucket"] <= prompt["prompt_tokens"] <= prompt["bucket"], prompt["id"]
        assert prompt["prompt"].endswith("\n")  # whole lines
    for bucket in (64, 192, 512):
        assert len({prompt["id"].split(":")[0] for prompt in prompts if prompt["bucket"] == bucket}) == 3
    assert make_long_prompts(documents, tokenizer, [512, 64, 192], 3, seed=1) == prompts
    assert make_long_prompts(documents, tokenizer, [512, 64, 192], 3, seed=2) != prompts


def test_written_set_loads_with_the_bucket_as_category(documents, tokenizer, tmp_path):
    heldout = tmp_path / "heldout.jsonl"
    heldout.write_text("".join(json.dumps({"path": doc.path, "text": doc.text}) + "\n" for doc in documents))
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    count = write_long_prompts(heldout, tmp_path / "tokenizer", tmp_path / "long.jsonl", [256, 128], 2, seed=0)
    assert count == 4
    prompts = load_prompts(str(tmp_path / "long.jsonl"))
    assert [prompt.category for prompt in prompts] == ["ctx128", "ctx128", "ctx256", "ctx256"]


def test_bad_requests_are_one_line_errors(documents, tokenizer):
    with pytest.raises(DraftcountError, match="distinct token counts"):
        check_buckets([64, 64])
    with pytest.raises(DraftcountError, match="exceeds the target's context"):
        check_buckets([128, 1000], context=1024, new_tokens=64)
    assert check_buckets([896, 128], context=1024, new_tokens=64) == [128, 896]
    with pytest.raises(DraftcountError, match="held-out documents hold"):
        make_long_prompts(documents[:2], tokenizer, [64], per_bucket=3, seed=0)
    with pytest.raises(DraftcountError, match="held-out documents hold"):
        make_long_prompts([Document("tiny.py", "x = 1\n")], tokenizer, [64], per_bucket=1, seed=0)
