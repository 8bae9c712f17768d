"""Token trees: the data structure every draft is (``tree``), EAGLE-2-style beam growth (``beam``) and
Sequoia's static-tree dynamic program (``sequoia``)."""
