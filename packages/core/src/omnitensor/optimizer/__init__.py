"""The PTIR optimizer: passes, rewrite patterns, the default pipeline and dumps (DESIGN §2).

Entry point: ``optimize(fn, PassContext(...)) -> (fn, OptimizeStats)``. Process-wide counters
live in `stats`; the pattern registry behind ``omnitensor patterns --rewrites`` in `registry`.
"""

from .context import Pass as Pass
from .context import PassContext as PassContext
from .context import PassResult as PassResult
from .dump import Trace as Trace
from .dump import start_trace as start_trace
from .passes import CSEPass as CSEPass
from .passes import DCEPass as DCEPass
from .passes import HoistCache as HoistCache
from .passes import HoistSplit as HoistSplit
from .passes import PatternPass as PatternPass
from .passes import plan_hoist as plan_hoist
from .passes import split_param_only as split_param_only
from .pipeline import OptimizeStats as OptimizeStats
from .pipeline import PipelineOptimizer as PipelineOptimizer
from .pipeline import knobs as knobs
from .pipeline import optimize as optimize
from .pipeline import optimize_for_backend as optimize_for_backend
from .pipeline import stats as stats
from .registry import Pattern as Pattern
from .registry import all_patterns as all_patterns
from .registry import pattern as pattern
from .rewrite import Rewriter as Rewriter
from .rewrite import apply_patterns as apply_patterns

__all__ = [
    "CSEPass",
    "DCEPass",
    "HoistCache",
    "HoistSplit",
    "OptimizeStats",
    "Pass",
    "PassContext",
    "PassResult",
    "Pattern",
    "PatternPass",
    "PipelineOptimizer",
    "Rewriter",
    "Trace",
    "all_patterns",
    "apply_patterns",
    "knobs",
    "optimize",
    "optimize_for_backend",
    "pattern",
    "plan_hoist",
    "split_param_only",
    "start_trace",
    "stats",
]
