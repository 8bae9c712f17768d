"""`polybasic`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.polybasic import PolybasicOptions
from methods.polybasic.adapter import build
from methods.polybasic.training import train_mid

METHOD = MethodSpec(options=PolybasicOptions, build=build, train=train_mid)
