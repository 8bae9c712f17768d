import csv

import pytest

from harness.errors import DraftcountError
from harness.measure.calibrations import verifier_acceptance
from tests.helpers import build_tokenizer, make_llama, save_model_dir, train_briefly


def test_every_verifier_on_the_same_trees(tmp_path):
    tokenizer = build_tokenizer(300)
    target = save_model_dir(tmp_path / "target", train_briefly(make_llama(vocab=len(tokenizer), seed=1), 30),
                            tokenizer)
    draft = save_model_dir(tmp_path / "draft", train_briefly(make_llama(vocab=len(tokenizer), hidden=16, seed=2), 30),
                           tokenizer)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("def add(a, b):\nreturn a + b\nclass Point:\n")
    out = tmp_path / "verifiers.csv"
    assert verifier_acceptance.main(["--method", "sd", "--draft", str(draft), "--target", str(target), "--prompts",
                                     str(prompts), "--temperature", "1", "--trials", "8", "--max-new-tokens", "24",
                                     "--out", str(out), "--no-progress"]) == 0
    rows = {row["verifier"]: row for row in csv.DictReader(out.open())}
    assert set(rows) == {"token_level", "traversal"}
    assert float(rows["token_level"]["tau_ratio_to_token_level"]) == pytest.approx(1.0)
    assert int(rows["traversal"]["trees"]) == int(rows["token_level"]["trees"]) > 0
    # on a chain, traversal verification accepts at least as much in expectation: never clearly less
    assert float(rows["traversal"]["difference_ci_high"]) > 0
    with pytest.raises(DraftcountError, match="temperature"):
        verifier_acceptance.main(["--method", "sd", "--draft", str(draft), "--target", str(target), "--prompts",
                                  str(prompts)])
