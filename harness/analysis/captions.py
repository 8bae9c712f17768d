"""Each figure's caption in the report: what is plotted, so a reader of the figure alone can tell."""

FIGURES: dict[str, str] = {
    "speedup": "Speedup over `ar` per dataset for each method's main variant and the A/A control `ar_control` "
               "(geometric mean of paired per-turn ratios; error bars: prompt-bootstrap 95% interval); a white "
               "diamond marks the bound, the speedup with zero host time. Cross-hatched bars: greedy turns that "
               "left the paired `ar` output; a red note: the control outside +-3% (see the report's warnings).",
    "phases": "Time per emitted token by phase (mean over datasets): the target's prefill and verify forwards, the "
              "drafter's forwards, verification and sampling, and the host's share (everything else).",
    "tau": "Acceptance length tau (EAGLE/Spec-Bench: mean accepted length per decoding step, prefill excluded); the "
           "dot marks accepted draft tokens per verification step (no bonus token).",
    "waste": "Compute per emitted token (FLOPs, mean over datasets): drafter and verifier work that led to an "
             "emitted token (solid) and work thrown away (hatched).",
    "budget": "Tau and speedup against the tokens verified per step (tree size), for variants of one method "
              "that differ only in their draft budget.",
    "depth": "Per-depth acceptance rate: share of verification steps that reached depth d - 1 and accepted a "
             "draft token at depth d.",
    "ablation": "The lyanna ablation: tau, speedup and drafter-FLOP waste of each switch against the default "
                "(plain bars: T = 0, hatched: T = 1).",
    "efficiency": "Speedup against tokens per target forward for every dataset (main variants); the dashed line "
                  "is the bound speedup = tokens per forward of overhead-free drafting.",
    "categories": "Speedup over `ar` per category of each prompt set that has several (its prompts' own "
                  "categories: the domains of `stdlib_domains`, Spec-Bench's tasks with MT-Bench's eight "
                  "categories as one; bars: prompt-bootstrap 95% interval).",
    "context_length": "Tau against the prompt's length (tokens, by bucket of the long-context set `stdlib_long`): a "
                      "drafter that attends over the context (eagle) against one that reads the last state only "
                      "(owl, OWL's question).",
    "samples": "Tau against the sample index, for variants run with several samples per prompt (a method that "
               "learns across one prompt's samples, as stand's store does, should rise).",
}
