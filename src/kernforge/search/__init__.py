"""search: explore candidates for one task with a strategy, under an iteration budget."""

from kernforge.search.engine import SearchContext, search_task
from kernforge.search.strategy import STRATEGIES, Strategy, get_strategy

__all__ = ["STRATEGIES", "SearchContext", "Strategy", "get_strategy", "search_task"]
