"""Measuring a run: the per-request table, the summary record and its aggregation, goodput SLOs
and the printed summary block."""
