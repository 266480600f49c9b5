"""The report: results/** read with pandas into tables (summary, overhead, decomposition) and figures.

`python -m harness.report [RESULTS_DIR]` is a separate command from the benchmark; it reads run
directories only and never imports an engine. `build` assembles the report, `tables` and `stats`
compute, `plots*` draw (one registry of figures, `registry.FIGURES`), `figstyle` keeps colours fixed.
"""

from harness.report.build import FIGURE_DIR, Report, build_report, load, main
from harness.report.describe import describe

__all__ = ["FIGURE_DIR", "Report", "build_report", "describe", "load", "main"]
