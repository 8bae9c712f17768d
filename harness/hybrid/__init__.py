"""Hybrid targets (Mamba2 + attention): token trees verified in one pass, paths committed by replay (STree)."""
