"""Projections: what measured acceptance would give at another scale or load: latencies at Llama-3.1-8B's shape
and the speedups they project (``projection``, ``project_8b``), the batch-size sweep (``load``) and its projection to
a GPU latency table (``project_load``)."""
