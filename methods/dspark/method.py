"""`dspark`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.dflash.cost import COST
from methods.dspark import DSparkOptions
from methods.dspark.adapter import build
from methods.dspark.training import train_dspark

METHOD = MethodSpec(options=DSparkOptions, build=build, train=train_dspark, cost=COST)
