"""`python -m harness.advise`: which prefix cache serves a given traffic best, and why.

A designed grid of runs (grid.py) through the run pipeline (runner.py), decided by the claims'
verdict rules (verdict.py), explained by the 2 x 2 decomposition and the hit-rate ceilings
(why.py), written as advice.md with one figure (text.py, figure.py).
"""
