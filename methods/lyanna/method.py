"""`lyanna`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.lyanna import LyannaOptions
from methods.lyanna.adapter import build
from methods.lyanna.cost import COST
from methods.lyanna.training import train_lyanna

METHOD = MethodSpec(options=LyannaOptions, build=build, train=train_lyanna, cost=COST)
