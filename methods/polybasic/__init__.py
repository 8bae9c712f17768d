"""`polybasic`: Polybasic speculative decoding (Wang et al., ICML 2025), a target <- mid <- small chain.

adapter: the inner speculative loop (small drafts, mid verifies) and the block sent to the target; stage: one
drafting model with its KV cache and counters; training: the mid LM's distillation from the target. The cost
rule (the paper's T = sum_i F_i T_i and its model-insertion condition, from measured latencies and acceptance
lengths) is ``harness.analysis.polybasic``; the 8B-shape projection has no mid-model latency, so ``cost`` is
None there.
"""

from harness.engine.method_spec import MethodSpec
from methods.polybasic.adapter import PolybasicOptions, build
from methods.polybasic.training import train_mid

METHOD = MethodSpec(options=PolybasicOptions, build=build, train=train_mid)
