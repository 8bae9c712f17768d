"""`owl`: OWL (Lee et al. 2025, arXiv 2510.07535): an LSTM drafter conditioned only on the target's last hidden
state, so its drafts and cost do not depend on the context length; HOWL, its hybrid with suffix matching, is the
option ``hybrid: suffix``.

model: the sum-LSTM (Arctic LSTM speculator equations); adapter: EAGLE-2 trees and HOWL's per-step choice;
training: its trainer on short windows; cost: its cost model for the 8B-shape projection.
"""

from harness.engine.method_spec import MethodSpec
from methods.owl.adapter import OwlOptions, build
from methods.owl.cost import COST
from methods.owl.training import train_owl

METHOD = MethodSpec(options=OwlOptions, build=build, train=train_owl, cost=COST)
