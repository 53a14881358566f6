"""hyperpod-quickstart: SageMaker HyperPod clusters that run at full network speed.

Kept free of imports so that node-side code (lifecycle, scripts) can ship this
file as the parent package with the standard library only.
"""

__version__ = "0.1.0"
