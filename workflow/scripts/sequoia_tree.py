"""Rule sequoia_tree: the static tree maximising expected tokens per second (dynamic programming)."""
import json
from pathlib import Path

from harness.trees.sequoia import choose_budget, optimal_tree

settings = snakemake.params.tree  # noqa: F821
acceptance = json.loads(Path(snakemake.input.acceptance).read_text())  # noqa: F821
latency = json.loads(Path(snakemake.input.latency).read_text())  # noqa: F821
target_latency = {int(size): seconds for size, seconds in latency["target"].items()
                  if int(size) - 1 <= settings.get("max_budget", 64)}
draft_step = json.loads(Path(snakemake.input.draft_step).read_text())["draft_step"]  # noqa: F821
shape, rates = choose_budget(acceptance["acceptance"], target_latency, draft_step,
                             settings.get("max_depth"))
budget = snakemake.wildcards.budget  # noqa: F821
if budget != "auto":  # a fixed budget: the best shape of that size, whatever the latencies say
    shape = optimal_tree(acceptance["acceptance"], int(budget), settings.get("max_depth"))
summary = {
    "parents": list(shape.parents), "budget": shape.draft_nodes, "budget_rule": budget, "depth": shape.depth,
    "expected_tokens": shape.expected_tokens, "estimated_tokens_per_s": rates,
    "acceptance": acceptance["acceptance"], "temperature": acceptance["temperature"],
    "replacement": acceptance["replacement"], "max_depth": settings.get("max_depth"),
}
Path(snakemake.output[0]).write_text(json.dumps(summary, indent=2) + "\n")  # noqa: F821
print(json.dumps({key: summary[key] for key in ("budget", "depth", "expected_tokens", "acceptance")}))
