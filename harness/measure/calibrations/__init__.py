"""Calibrations: measurements on this machine that choose a setting before a run. The tree shape and chain length of
highest estimated tokens/s (``calibration``, ``tree_shape``, ``chain_length``, from ``latency``), Sequoia's and
STAND's trees (``latency``, ``acceptance``, ``static_tree``), the verifiers on the same trees
(``verifier_acceptance``), a reduced draft vocabulary (``draft_vocab``), the answer-generation batch size
(``generation_throughput``) and the feature dump's precision (``dump_precision``)."""
