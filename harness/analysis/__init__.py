"""From records to results: the metric table (``metrics``), the summary tables, figures, the report, divergence
from ``ar`` and the Spec-Bench export. Never imports torch."""
