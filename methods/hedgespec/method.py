"""`hedgespec`: ``METHOD``, what the catalog loads for a run: the experts built from their specs (the options and
the spec parser are the package's, torch-free)."""

from __future__ import annotations

from pathlib import Path

from harness.backend.models import load_model
from harness.engine.method_spec import BuildInputs, CostModel, Latencies, MethodSpec, build_adapter, method_spec
from harness.errors import DraftcountError
from methods.hedgespec import HedgeSpecOptions, parse_expert
from methods.hedgespec.adapter import Expert, HedgeSpecAdapter


def build(options: HedgeSpecOptions, inputs: BuildInputs) -> HedgeSpecAdapter:
    experts, seen = [], {}
    for spec in options.experts:
        method, settings = parse_expert(spec)
        drafter, draft = settings.pop("drafter", None), settings.pop("draft", None)
        name = settings.pop("name", method)
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name}{seen[name]}"
        draft_model = (load_model(draft, str(inputs.target.dtype).removeprefix("torch."), str(inputs.target.device),
                                  with_tokenizer=inputs.target.tokenizer is not None)
                       if draft else None)
        adapter, _ = build_adapter(method, settings, BuildInputs(inputs.target, draft_model,
                                                                 Path(drafter) if drafter else None))
        if adapter.separate_root_forward:
            raise DraftcountError(f"hedgespec expert {spec!r} verifies unfused; experts must share one forward")
        experts.append(Expert(name, adapter))
    return HedgeSpecAdapter(experts, options.reset, options.seed)


def drafting_seconds(options: dict, latencies: Latencies) -> float:
    """Every expert drafts every step: the sum of their drafting costs (nan where one is not modelled)."""
    experts = options.get("experts") or HedgeSpecOptions.experts
    experts = experts.split(",") if isinstance(experts, str) else experts
    total = 0.0
    for spec in experts:
        method, settings = parse_expert(spec)
        cost = method_spec(method).cost
        total += cost.drafting_seconds(settings, latencies) if cost is not None else float("nan")
    return total


METHOD = MethodSpec(options=HedgeSpecOptions, build=build, cost=CostModel(drafting_seconds))
