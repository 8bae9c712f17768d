"""`medusa`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.medusa import MedusaOptions
from methods.medusa.adapter import build
from methods.medusa.cost import COST
from methods.medusa.training import train_medusa

METHOD = MethodSpec(options=MedusaOptions, build=build, train=train_medusa, cost=COST)
