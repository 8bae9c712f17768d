"""The method catalog: one line per method.

Adding a method: write its module (or package) in this folder, defining ``METHOD = MethodSpec(...)`` (see
docs/extending.md), and add one ``Entry`` line below. The CLI (``python -m harness methods``), the workflow's
``bench_<name>``/``ablate_<name>``/``train_<name>`` targets, the figures' colours, the projection and the
conformance tests all read this list. Keep this file free of torch: only ``harness.catalog`` is imported here.
"""

from harness.catalog import Entry

CATALOG = (  # name, module, summary, needs (None | "draft" | "drafter" | ("draft", "drafter")), colour in the figures
    Entry("ar", "methods.ar", "autoregressive baseline: one target forward per token", None, "#7f7f7f"),
    Entry("sd", "methods.sd", "speculative decoding: a draft LM proposes a chain of gamma tokens", "draft", "#1f77b4"),
    Entry("tree_sd", "methods.tree_sd", "token-tree SD with a draft LM (SpecInfer/Sequoia)", "draft", "#2ca02c"),
    Entry("eagle", "methods.eagle", "EAGLE-2 dynamic trees over a trained EAGLE head", "drafter", "#ff7f0e"),
    Entry("lyanna", "methods.lyanna", "Lyanna: hidden-state drafter, token-info injection", "drafter", "#d62728"),
    Entry("pld", "methods.pld", "prompt lookup: n-gram match in the context, drafted as a chain", None, "#8c564b"),
    Entry("stand", "methods.stand", "STAND: drafts sampled from a store of the target's n-gram distributions", None,
          "#e377c2"),
    Entry("reader", "methods.reader", "READER: a drafter's tree grafted with retrieved continuations", None,
          "#bcbd22"),
    Entry("hedgespec", "methods.hedgespec", "HedgeSpec: NormalHedge picks one of N drafters each step", None,
          "#17becf"),
    Entry("owl", "methods.owl", "OWL: LSTM drafter on the last hidden state only (HOWL: + suffix match)", "drafter",
          "#6b3fa0"),
    Entry("prism", "methods.prism", "PRISM: M EAGLE modules, one per draft step, over one shared KV cache", "drafter",
          "#393b79"),
    Entry("polybasic", "methods.polybasic", "Polybasic SD: target <- trained mid LM <- draft LM, staged verification",
          ("draft", "drafter"), "#b5651d"),
)
