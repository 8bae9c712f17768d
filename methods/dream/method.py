"""`dream`: ``METHOD``, what the catalog loads for a run (the options are the package's)."""

from harness.engine.method_spec import MethodSpec
from methods.dream import DreamOptions
from methods.dream.adapter import build
from methods.dream.cost import COST
from methods.dream.training import train_dream

METHOD = MethodSpec(options=DreamOptions, build=build, train=train_dream, cost=COST)
