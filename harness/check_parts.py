"""The parts of workflow/scripts/gpu_check.py's check (its ``--only``), without torch: so that
workflow/scripts/gpu_session.py refuses a bad ``--only`` before it starts anything, and knows which parts
also measure torch.compile, from the same table gpu_check runs."""

from __future__ import annotations

GROUPS = {  # --only: the parts of the check after training the zoo (which every part needs)
    "bench": "every method at every temperature, summary, figures, report; bf16 divergence from ar",
    "lossless": "every main method at temperature 0 in float32 against ar, eager and graphed (CPU: static caches)",
    "ar_vs_generate": "our ar against model.generate(), the op profile (CUDA with compile: against its compiled "
                      "cache too)",
    "overheads": "each overhead switch against its absence, every method (CUDA with compile: torch.compile too)",
    "host_sync": "host synchronisations per decoding step",
    "engine_pass": "the benchmark again on static caches + CUDA graphs (CPU: static caches)",
}
COMPILED_PARTS = ("ar_vs_generate", "overheads")  # the parts that also measure torch.compile (CUDA, compile on)


def named_parts(text: str | None) -> frozenset[str]:
    """``--only``'s comma-separated parts (None: all of them); an unknown name, or none, is an error."""
    if text is None:
        return frozenset(GROUPS)
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--only names no part; the parts are {', '.join(GROUPS)}")
    unknown = [name for name in names if name not in GROUPS]
    if unknown:
        raise ValueError(f"--only: no part {', '.join(map(repr, unknown))}; the parts are {', '.join(GROUPS)}")
    return frozenset(names)


def parse_groups(text: str | None, extra_prompts: int) -> frozenset[str]:
    """``named_parts(text)``, refused when ``extra_prompts`` = 0 turns off every part named: all but ``bench``
    are checks after the report."""
    names = named_parts(text)
    if text is not None and extra_prompts < 1 and names - {"bench"}:
        raise ValueError(f"--only {text} with --extra-prompts {extra_prompts}: the checks after the report are "
                         "off, so only bench would run")
    return names
