"""The method catalog: one entry per method.

Adding a method: write its module (or package) in this folder, defining ``METHOD = MethodSpec(...)`` (see
docs/extending.md), and add one ``Entry`` below. The CLI (``python -m harness methods``), the workflow's
``bench_<name>``/``ablate_<name>``/``train_<name>`` targets, the plan's option checks, the figures' colours, the
projection and the conformance tests all read this list. Keep this file free of torch: only ``harness.catalog`` is
imported here. A method package keeps its options in its torch-free ``__init__`` (``options=``) and its
``METHOD`` in ``method.py``. A method of another package joins this list through an entry point of the group
``draftcount.methods`` (docs/extending.md, *A method from another package*).
"""

from harness.catalog import Entry

CATALOG = (  # name, module (METHOD), summary, needs, colour in the figures, options ("module:Class", torch-free);
    # drafts=False: the one method that proposes no draft tokens; batched=True: decodes batches of B > 1 (load study)
    Entry("ar", "methods.ar.method", "autoregressive baseline: one target forward per token",
          None, "#000000", "methods.ar:AutoregressiveOptions", drafts=False, batched=True),
    Entry("sd", "methods.sd.method", "speculative decoding: a draft LM proposes a chain of gamma tokens",
          "draft", "#009e73", "methods.sd:SpeculativeDecodingOptions", batched=True),
    Entry("tree_sd", "methods.tree_sd.method", "token-tree SD with a draft LM (SpecInfer/Sequoia)",
          "draft", "#cc79a7", "methods.tree_sd:TreeSpeculativeDecodingOptions", batched=True),
    Entry("eagle", "methods.eagle.method", "EAGLE-2 dynamic trees over a trained EAGLE head",
          "drafter", "#0072b2", "methods.eagle:EagleOptions", batched=True),
    Entry("lyanna", "methods.lyanna.method", "Lyanna: hidden-state drafter, token-info injection",
          "drafter", "#d55e00", "methods.lyanna:LyannaOptions", batched=True),
    Entry("dflash", "methods.dflash.method", "DFlash: a block drafted in one non-causal forward over injected target "
          "states", "drafter", "#000075", "methods.dflash:DFlashOptions", batched=True),
    Entry("dspark", "methods.dspark.method", "DSpark: DFlash's block + a Markov head, verify length planned from "
          "predicted survival", "drafter", "#42d4f4", "methods.dspark:DSparkOptions"),
    Entry("pard", "methods.pard.method", "PARD: a draft LM adapted with mask tokens drafts a chain of k in one "
          "forward", "drafter", "#8c564b", "methods.pard:PardOptions"),
    Entry("pld", "methods.pld.method", "prompt lookup: n-gram match in the context, drafted as a chain",
          None, "#808000", "methods.pld:PromptLookupOptions"),
    Entry("suffix", "methods.suffix.method", "Suffix Decoding: frequency-scored trees from suffix trees over the request "
          "and the run's earlier outputs", None, "#800000", "methods.suffix:SuffixOptions"),
    Entry("stand", "methods.stand.method", "STAND: drafts sampled from a store of the target's n-gram distributions",
          None, "#f032e6", "methods.stand:StandOptions"),
    Entry("reader", "methods.reader.method", "READER: a drafter's tree grafted with retrieved continuations",
          None, "#bfef45", "methods.reader:ReaderOptions"),
    Entry("hedgespec", "methods.hedgespec.method", "HedgeSpec: NormalHedge picks one of N drafters each step",
          None, "#ffd8b1", "methods.hedgespec:HedgeSpecOptions"),
    Entry("owl", "methods.owl.method", "OWL: LSTM drafter on the last hidden state only (HOWL: + suffix match)",
          "drafter", "#911eb4", "methods.owl:OwlOptions"),
    Entry("prism", "methods.prism.method", "PRISM: M EAGLE modules, one per draft step, over one shared KV cache",
          "drafter", "#4363d8", "methods.prism:PrismOptions"),
    Entry("medusa", "methods.medusa.method", "Medusa heads on the last hidden state (Hydra: heads see the drafted "
          "path), EAGLE-2-style trees", "drafter", "#dcbeff", "methods.medusa:MedusaOptions"),
    Entry("mtp", "methods.mtp.method", "MTP modules (DeepSeek-V3's multi-token prediction) bolted on post hoc, a "
          "chain by default", "drafter", "#e69f00", "methods.mtp:MtpOptions"),
    Entry("polybasic", "methods.polybasic.method", "Polybasic SD: target <- trained mid LM <- draft LM, staged "
          "verification", ("draft", "drafter"), "#ffe119", "methods.polybasic:PolybasicOptions"),
    Entry("dream", "methods.dream.method", "DREAM: a 3-layer drafter cross-attending to the target's features "
          "through tanh gates, EAGLE-2 trees; compresses an image to its most attended tokens", "drafter", "#e6194b",
          "methods.dream:DreamOptions"),
)
