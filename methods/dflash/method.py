"""`dflash`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.dflash import DFlashOptions
from methods.dflash.adapter import build
from methods.dflash.cost import COST
from methods.dflash.training import train_dflash

METHOD = MethodSpec(options=DFlashOptions, build=build, train=train_dflash, cost=COST)
