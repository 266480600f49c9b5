"""The simulated executor: the real scheduler and caches, the model forward replaced by a cost model.

`cost_model` turns a step's shape into seconds (a GPU roofline or a fit measured on this CPU),
`executor` advances a virtual clock by it, `calibrate` measures the fit.
"""
