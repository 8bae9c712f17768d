"""`mtp`: ``METHOD``, what the catalog loads for a run (the options are the package's). A step is one transformer
block over the target's width, as an EAGLE head's, so the projection reuses EAGLE's cost model."""

from harness.engine.method_spec import MethodSpec
from methods.eagle.cost import COST
from methods.mtp import MtpOptions
from methods.mtp.adapter import build
from methods.mtp.training import train_mtp

METHOD = MethodSpec(options=MtpOptions, build=build, train=train_mtp, cost=COST)
