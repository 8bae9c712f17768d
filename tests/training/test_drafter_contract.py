"""The drafter kit's contract (docs/extending.md, *The drafter kit's contract*): a drafter without a method the kit
calls (``harness.training.drafter_contract.DRAFTER_METHODS``) stops ``python -m harness train`` with one line naming its
class and what it lacks, before the first training step; a feature batch is what the page says it is."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness import cli
from harness.data.token_streams import save_tokens
from harness.engine import method_spec as method_spec_module
from harness.engine.method_spec import MethodSpec
from harness.errors import DraftcountError
from harness.options import parse_options
from harness.training.drafter_contract import DRAFTER_METHODS, Drafter, check_drafter, parameter_components
from harness.training.drafters import (
    DrafterLoopOptions, DrafterTrainRequest, Fitted, feature_source, fit_drafter, frozen_target, train_drafter,
)
from harness.training.features import dump_features
from tests.helpers import ROOT, make_llama


class Headless(nn.Module):
    """A drafter as a plug-in might write it: a linear layer, and no ``trainable_parameters()``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)


class Counted(Headless):
    def trainable_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters())


@pytest.fixture(scope="module")
def target_and_tokens(tmp_path_factory):
    root = tmp_path_factory.mktemp("contract")
    make_llama(vocab=32, hidden=16, layers=2, heads=2, seed=1).save_pretrained(root / "target")
    save_tokens(root / "tokens.pt", torch.randint(0, 32, (2000,), generator=torch.Generator().manual_seed(0),
                                                  dtype=torch.int32))
    return root


def trainer(kind: type[nn.Module], batches: list[dict[str, torch.Tensor]]):
    """A family's trainer around a ``kind`` drafter, its loss recording the batches it gets."""

    def train(request: DrafterTrainRequest) -> dict:
        options = parse_options(DrafterLoopOptions, request.options, "contract training")
        target = frozen_target(request)
        source = feature_source(request, target, ["last", 1], options.seq_len)
        module = kind(target.config.hidden_size).to(target.device)

        def loss(batch: dict[str, torch.Tensor]) -> torch.Tensor:
            batches.append(batch)
            return module.proj(batch["last"]).pow(2).mean()

        return train_drafter(request, options, target, source,
                             lambda: Fitted(module, fit_drafter(module, loss, source, target, request, options)),
                             lambda drafter, batch: [0.5], lambda drafter, path, provenance: path.mkdir())

    return train


def test_a_drafter_without_a_kit_method_stops_train_before_the_first_step_with_one_line(target_and_tokens,
                                                                                      monkeypatch, capsys):
    root = target_and_tokens
    batches: list = []
    monkeypatch.setattr(method_spec_module, "method_spec",
                        lambda name: MethodSpec(options=DrafterLoopOptions, build=None,
                                                train=trainer(Headless, batches)))
    code = cli.main(["train", "--method", "eagle", "--target", str(root / "target"), "--data", str(root / "tokens.pt"),
                     "--out", str(root / "headless"), "--steps", "50", "--opt", "seq_len=16", "--no-progress"])
    err = capsys.readouterr().err  # (transformers' loading bars aside)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == ("error: eagle: drafter class Headless lacks trainable_parameters(), which the drafter kit calls "
                        "(harness.training.drafter_contract.Drafter; docs/extending.md, *The drafter kit's contract*)")
    assert batches == [] and not (root / "headless").exists()  # no step ran, nothing was written


def test_check_drafter_names_what_it_lacks_and_takes_a_full_drafter():
    check_drafter(Counted(4), "peek")
    declared = tuple(name for name, value in vars(Drafter).items() if not name.startswith("_") and callable(value))
    assert declared == DRAFTER_METHODS  # the protocol and the list check_drafter holds a drafter to agree
    with pytest.raises(DraftcountError, match=r"^peek: the drafter to train is a str, not a torch.nn.Module$"):
        check_drafter("head", "peek")
    with pytest.raises(DraftcountError, match=r"^peek: drafter class Headless lacks trainable_parameters\(\)"):
        check_drafter(Headless(4), "peek")


def test_the_page_states_every_kit_method_and_the_feature_batch(target_and_tokens):
    page = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    section = page.split("#### The drafter kit's contract", 1)[1].split("\n#### ", 1)[0]
    assert all(f"`{name}() -> int`" in section or f"`{name}()`" in section for name in DRAFTER_METHODS)
    assert "`torch.int64` (B, T)" in section and "`torch.float32` tensor (B, T, H)" in section


@pytest.mark.parametrize("source", ["tokens", "dump"])
def test_a_feature_batch_holds_int64_ids_and_float32_features(target_and_tokens, tmp_path, source):
    """What the page says a loss gets, from a token stream (features on the fly) and from a dump (bf16 on disk)."""
    root = target_and_tokens
    data = root / "tokens.pt"
    if source == "dump":
        from harness.backend.models import load_model
        from harness.data.token_streams import load_tokens

        target = load_model(str(root / "target"), with_tokenizer=False)
        data = tmp_path / "dump"
        dump_features(target.model, load_tokens(root / "tokens.pt"), data, 16, 16, ["last", 1], 8, "bfloat16", 0)
    batches: list = []
    request = DrafterTrainRequest(method="contract", target=str(root / "target"), data=data, out=tmp_path / "out",
                                  steps=1, progress=False, options={"seq_len": "16", "batch_size": "4"})
    trainer(Counted, batches)(request)
    assert len(batches) == 1
    assert {key: (value.dtype, tuple(value.shape)) for key, value in batches[0].items()} == {
        "input_ids": (torch.int64, (4, 16)), "last": (torch.float32, (4, 16, 16)),
        "layer1": (torch.float32, (4, 16, 16))}


def test_parameters_by_component_add_up_to_the_trainable_ones():
    """The models table's components: a tied weight counted once, a frozen one not at all, the families' names
    sorted into backbone, injection, embedding and heads."""
    lm = make_llama(vocab=40, hidden=16, layers=1)
    lm.lm_head.weight = lm.model.embed_tokens.weight  # tied, as the zoo's draft LM
    components = parameter_components(lm)
    assert list(components) == ["backbone", "embedding"] and components["embedding"] == 40 * 16
    assert sum(components.values()) == sum(p.numel() for p in lm.parameters())
    drafter = nn.ModuleDict({"proj": nn.Linear(4, 4), "parent_up": nn.Linear(4, 8, bias=False),
                             "embed_tokens": nn.Embedding(8, 4), "markov_head": nn.Linear(4, 2)})
    drafter["embed_tokens"].weight.requires_grad_(False)  # the target's, frozen (EAGLE's)
    assert parameter_components(drafter) == {"backbone": 20, "injection": 32, "heads": 10}
