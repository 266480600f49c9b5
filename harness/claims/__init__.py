"""`python -m harness.claims`: re-measure published claims about APC and RadixAttention.

Each claim (registry.py) carries its source and the verdict rule, fixed before anything runs; its
module measures it in-process (experiment.py) and returns a Finding (record.py). The writer turns
the findings into claims.md and claims.csv with one figure per claim.
"""
