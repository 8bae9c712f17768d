"""`lyanna`: the paper's hidden-state drafter ("Make Every Draft Count", arXiv 2602.21224).

adapter: drafting (beam-grown trees, draft reuse, verification fusion, run-ahead); model: the backbone and
token-info injection; training: its trainer; cost: its cost model for the 8B-shape projection.
"""

from harness.engine.method_spec import MethodSpec
from methods.lyanna.adapter import LyannaOptions, build
from methods.lyanna.cost import COST
from methods.lyanna.training import train_lyanna

METHOD = MethodSpec(options=LyannaOptions, build=build, train=train_lyanna, cost=COST)
