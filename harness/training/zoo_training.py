"""Training and evaluating the zoo's target and draft LMs (called by workflow/scripts/train_lm.py), and the same
regime figures for a target imported rather than trained (``python -m harness evaluate-target``)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from harness.engine.adapter import NoDrafts
from harness.engine.loop import generate
from harness.data.token_streams import even_windows, load_tokens, random_windows
from harness.backend.models import eos_ids, load_model, wrap_model
from harness.data.prompts import Prompt, encode_turn
from harness.store.provenance import imported_source
from harness.store.records import environment
from harness.verify.sampling import SamplingConfig, make_generator
from harness.training.drafter_contract import COMPONENTS, parameter_components
from harness.training.distill import distillation_step_loss
from harness.training.features import FeatureSource
from harness.training.gates import apply_gates
from harness.training.loop import TrainConfig, batches_from_step, train
from harness.training.zoo import (
    ModelShape, grow_depth, heldout_perplexity, new_model, next_token_loss, repetition_rate,
    save_model,
    top1_agreement,
)


def snippets(heldout: torch.Tensor, prompts: int) -> list[torch.Tensor]:
    """The zoo's evaluation prompts: ``prompts`` 32-token windows spread over the held-out stream."""
    return list(even_windows(heldout, prompts, 32))


def degeneracy(model, tokenizer, prompts: list[torch.Tensor], new_tokens: int,
               eos: frozenset[int] = frozenset()) -> dict:
    """Greedy continuations of ``prompts`` (1-D token ids; held-out snippets, or a chat target's rendered
    questions, stopping at ``eos``): mean 4-gram repetition rate and the share of looping ones."""
    lm = wrap_model(model, tokenizer)
    adapter = NoDrafts()
    rates = []
    for window in prompts:
        output = generate(lm, adapter, window[None], new_tokens, SamplingConfig(), eos).output_ids
        rates.append(repetition_rate(output))
    return {"repetition_rate": sum(rates) / len(rates), "looping_share": sum(r > 0.5 for r in rates) / len(rates)}


@torch.no_grad()
def sampling_regime(model, tokenizer, prompts: list[torch.Tensor], new_tokens: int, seed: int = 0,
                    eos: frozenset[int] = frozenset()) -> dict:
    """The model's own T = 1 samples after ``prompts``: the mean entropy (nats) of its next-token distribution
    at each sampled position, and the mean probability mass of its top-1 and top-10 tokens there (how far drafting
    the sampled text can go: a peaked, low-entropy model is easy to draft at T = 1)."""
    lm = wrap_model(model, tokenizer)
    generator = make_generator(seed, lm.device)
    entropies, top1, top10 = [], [], []
    for window in prompts:
        output = generate(lm, NoDrafts(), window[None], new_tokens, SamplingConfig(temperature=1.0), eos,
                          generator=generator).output_ids
        # host: beside a host window
        ids = torch.cat([window, torch.tensor(output, dtype=window.dtype)])[None].to(lm.device)
        logits = model(ids).logits[0, window.numel() - 1:ids.shape[1] - 1].float()
        probabilities = torch.softmax(logits, dim=-1)
        entropies.append(-(probabilities * torch.log_softmax(logits, dim=-1)).sum(-1))
        top = probabilities.topk(min(10, probabilities.shape[-1]), dim=-1).values
        top1.append(top[:, 0])
        top10.append(top.sum(-1))
    return {"entropy_nats": float(torch.cat(entropies).mean()), "top1_mass": float(torch.cat(top1).mean()),
            "top10_mass": float(torch.cat(top10).mean()), "samples": len(prompts), "new_tokens": new_tokens}


def trained_on(device: str) -> dict:
    """The machine a model trained on: fp32 training is reproducible on one CPU type, not across CPU types (their
    kernels round differently), so the report names it beside the target's figures."""
    machine = environment()
    return {"device": device, "cpu": machine["hardware"]["cpu"], "gpus": machine["hardware"]["gpus"],
            "torch": machine["versions"]["torch"], "torch_threads": torch.get_num_threads(),
            "cpu_kernels": torch.backends.cpu.get_cpu_capability()}  # AVX2 / AVX512: ATEN_CPU_CAPABILITY sets it


def model_shape(fields: dict) -> ModelShape:
    """A config's ``shape`` section (lists as tuples: the shape is frozen)."""
    return ModelShape(**{key: tuple(value) if isinstance(value, list) else value for key, value in fields.items()})


def train_zoo_lm(role: str, tokenizer_dir: Path, train_tokens: Path, heldout_tokens: Path, corpus_summary: Path,
                 model_config: dict, evaluation: dict, out_dir: Path, metrics_path: Path, checkpoint: Path,
                 teacher_dir: Path | None = None, progress: bool = True, device: str = "cpu",
                 gates: dict[str, float] | None = None, allow_weak: bool = False,
                 teacher_features: Path | None = None) -> dict:
    """Train the target (next-token loss) or the draft (distillation from ``teacher_dir``) on ``device``,
    save, evaluate, and hold the result against its quality ``gates`` (harness/training/gates.py). With
    ``teacher_features`` (the target's feature dump, layer 'last') the draft distils on the dump's windows, the
    target's logits read through its LM head (``harness.training.distill``) instead of a forward per batch."""
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    tokens = load_tokens(train_tokens)
    heldout = load_tokens(heldout_tokens)
    shape = model_shape(model_config["shape"])
    train_settings = dict(model_config["train"])
    batch_size = train_settings.pop("batch_size", 16)
    seq_len = train_settings.pop("seq_len", 256)
    config = TrainConfig(**train_settings)
    model = new_model(shape, tokenizer, config.seed).to(device)
    teacher = None
    if teacher_dir is not None:
        teacher = AutoModelForCausalLM.from_pretrained(teacher_dir).to(device).eval()
        teacher.requires_grad_(False)
    temperature = model_config.get("distill_temperature", 1.0)
    source = None
    if teacher is not None:  # the target's logits: its LM head over these 'last' states
        source = (FeatureSource(["last"], seq_len, dump_dir=Path(teacher_features)) if teacher_features is not None
                  else FeatureSource(["last"], seq_len, target=teacher, tokens=tokens))

    def loss_fn(step: int) -> tuple[torch.Tensor, int]:
        if source is not None:
            return distillation_step_loss(model, teacher, source, step, config.seed, batch_size, temperature, device)
        windows = batches_from_step(step, config.seed,
                                    lambda g: random_windows(tokens, batch_size, seq_len, g)).to(device)
        return next_token_loss(model, windows), windows.numel()

    corpus = json.loads(Path(corpus_summary).read_text())
    fingerprint = {"role": role, "shape": model_config["shape"], "batch_size": batch_size, "seq_len": seq_len,
                   "corpus": corpus["splits"]["train"]["sha256"], "vocab": len(tokenizer),
                   "distill_temperature": temperature if teacher is not None else None,
                   **({"distilled_from": "dump"} if teacher is not None and teacher_features is not None else {})}
    result = train(model, loss_fn, config, checkpoint=checkpoint, fingerprint=fingerprint,
                   description=f"train {role}", progress=progress)
    windows = even_windows(heldout, evaluation["heldout_windows"], evaluation["window_len"]).to(device)
    grown = {}
    grow = model_config.get("grow") or {}
    if grow.get("num_layers"):  # a deeper model from the trained base (``grow_depth``), then trained on; 0: none
        grown["base"] = {"num_layers": shape.num_layers, "parameters": sum(p.numel() for p in model.parameters()),
                         "heldout_perplexity": heldout_perplexity(model, windows), "training": result.as_dict()}
        model = grow_depth(model, grow["num_layers"], config.seed)
        grow_train = {**model_config["train"], **grow.get("train", {})}
        grow_train.pop("batch_size", None), grow_train.pop("seq_len", None)
        grow_config = TrainConfig(**grow_train)
        fingerprint = {**fingerprint, "grow": grow}
        result = train(model, loss_fn, grow_config, checkpoint=checkpoint.with_name(checkpoint.name + ".grow"),
                       fingerprint=fingerprint, description=f"train {role} ({grow['num_layers']} layers)",
                       progress=progress)
    metrics = {
        "role": role,
        "parameters": sum(p.numel() for p in model.parameters()),
        COMPONENTS: parameter_components(model),
        **({"grown_from": grown["base"]} if grown else {}),
        "training": result.as_dict(),
        "tokens_per_second": result.tokens / result.seconds if result.seconds else 0.0,
        "trained_on": trained_on(device),
        "heldout_perplexity": heldout_perplexity(model, windows),
        "degeneracy": degeneracy(model, tokenizer, snippets(heldout, evaluation["degeneracy_prompts"]),
                                 evaluation["degeneracy_tokens"]),
        "sampling": sampling_regime(model, tokenizer, snippets(heldout, evaluation["degeneracy_prompts"]),
                                    evaluation["degeneracy_tokens"], config.seed),
    }
    if teacher is not None:
        metrics["top1_agreement_with_target"] = top1_agreement(teacher, model, windows)
        metrics["target_parameters"] = sum(p.numel() for p in teacher.parameters())
        metrics["parameter_ratio"] = metrics["target_parameters"] / metrics["parameters"]
    metrics = apply_gates(role, metrics, gates, allow_weak)
    provenance = {"kind": f"zoo-{role}", "config": model_config, "fingerprint": fingerprint,
                  "corpus": corpus, "metrics": metrics}
    save_model(out_dir, model, tokenizer, provenance)
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics


def evaluate_imported_target(target_dir: Path, prompts: list[Prompt], new_tokens: int, seed: int = 0,
                             device: str = "cpu") -> dict:
    """The regime figures of a target imported rather than trained (``harness.store.gguf_import``): its greedy
    repetition and looping share and its T = 1 entropy and top-1 / top-10 mass, on its own answers to ``prompts``
    (held-out chat questions rendered with its chat template, each answer ending at its end-of-turn token)."""
    target = load_model(str(target_dir), "float32", device)
    questions = [torch.tensor(encode_turn(target.tokenizer, [], prompt.turns[0]))  # host: prompt ids, moved when used
                 for prompt in prompts]
    eos = eos_ids(target)
    return {
        "role": "target",
        "parameters": sum(p.numel() for p in target.model.parameters()),
        "imported": imported_source(target_dir),
        "evaluated_on": f"its answers to {len(prompts)} held-out chat questions (up to {new_tokens} tokens)",
        "degeneracy": degeneracy(target.model, target.tokenizer, questions, new_tokens, eos),
        "sampling": sampling_regime(target.model, target.tokenizer, questions, new_tokens, seed, eos),
    }
