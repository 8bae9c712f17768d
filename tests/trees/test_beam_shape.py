"""A beam drafter's options as they ran: a measured shape file's depth and budget, not the defaults, in records."""

from __future__ import annotations

import json

from harness.options import options_as_dict, parse_options
from harness.trees.beam_shape import BeamOptions
from methods.eagle import EagleOptions


def test_a_shape_files_depth_and_budget_are_what_the_record_shows(tmp_path):
    shape = tmp_path / "shape.json"
    shape.write_text(json.dumps({"top_k": 4, "depth": 3, "budget": 15}))
    options = parse_options(EagleOptions, {"top_k": "4", "shape_file": str(shape)}, "eagle")
    assert (options.depth, options.budget) == (5, 24)  # the defaults stay on the parsed options
    recorded = options_as_dict(options)
    assert (recorded["depth"], recorded["budget"], recorded["shape_file"]) == (3, 15, str(shape))
    assert options_as_dict(BeamOptions(top_k=2, depth=4, budget=9))["budget"] == 9  # no file: the options' own
