"""The generation loop shared by every method (``loop``), the adapter protocol it calls (``adapter``), how the
target runs (``runtime``: cache kind, CUDA graphs, compile), the per-turn counters, the helpers drafters share
(``drafting``, ``draft_lm``) and how a method's adapter is built from the catalog (``method_spec``)."""
