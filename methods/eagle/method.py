"""`eagle`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.eagle import EagleOptions
from methods.eagle.adapter import build
from methods.eagle.cost import COST
from methods.eagle.training import train_eagle

METHOD = MethodSpec(options=EagleOptions, build=build, train=train_eagle, cost=COST)
