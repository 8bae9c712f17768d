"""`eagle`: EAGLE-2 dynamic draft trees over an EAGLE head (Li et al. 2024; EAGLE-3 feature fusion as an option).

adapter: drafting and committing; head: the network (official EAGLE-1/2 checkpoint layout); training: its
trainer; cost: its cost model for the 8B-shape projection.
"""

from harness.engine.method_spec import MethodSpec
from methods.eagle.adapter import EagleOptions, build
from methods.eagle.cost import COST
from methods.eagle.training import train_eagle

METHOD = MethodSpec(options=EagleOptions, build=build, train=train_eagle, cost=COST)
