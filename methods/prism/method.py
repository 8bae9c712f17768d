"""`prism`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.eagle.cost import COST
from methods.prism import PrismOptions
from methods.prism.adapter import build
from methods.prism.training import train_prism

METHOD = MethodSpec(options=PrismOptions, build=build, train=train_prism, cost=COST)
