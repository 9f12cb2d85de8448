"""The Python API: `estimate` and `plan` take the CLI's options as keywords and return frozen
results whose `to_json()` is the CLI's `--json` document for the same question. The CLI's
`estimate` and `plan` commands call the same functions (api.answers.estimate_answer,
api.answers.plan_answer).

Its rooms, lowest first: inputs/ reads a question, returned/ holds what comes back, answers/
answers it; entry.py joins them."""

from trainbudget.api.entry import estimate, plan
from trainbudget.api.returned.results import Estimate, Memory, PlanResult, Quotes
from trainbudget.core.errors import SpecError

__all__ = ["Estimate", "Memory", "PlanResult", "Quotes", "SpecError", "estimate", "plan"]
