"""`owl`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.owl import OwlOptions
from methods.owl.adapter import build
from methods.owl.cost import COST
from methods.owl.training import train_owl

METHOD = MethodSpec(options=OwlOptions, build=build, train=train_owl, cost=COST)
