"""Running models: loading, forward passes with FLOP tallies, KV caches (dynamic and static), CUDA graphs, and
device mechanics (non-blocking copies, the side stream, the one timer). Knows nothing of trees or methods."""
