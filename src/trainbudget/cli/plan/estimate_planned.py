"""`trainbudget estimate` with GPUs and no layout, as text: the planner's answer
(trainbudget.api.answers.estimate_planned) in the lines `plan` prints for its best plan."""

from __future__ import annotations

from trainbudget.api.answers.estimate_json import ANSWERS
from trainbudget.api.returned.results import Estimate as Answer
from trainbudget.cli.plan.estimate_views import explain, head_lines
from trainbudget.cli.plan.question import best_lines, inputs_lines
from trainbudget.cli.plan.uncertainty_view import sensitivity_line
from trainbudget.cli.tools.reliability_view import reliability_line
from trainbudget.core.units import format_bytes


def planner_lines(a: Answer, explained: bool) -> list[str]:
    """The answer's lines; `explained`: the derivation after them (--explain)."""
    e, found = a.single, a.search
    result = found.result
    head = head_lines(e, found.seq_len)
    out = [f"answer       {ANSWERS['planner']}", head[0], *inputs_lines(found), *head[2:]]
    out.append(
        f"searched     {result.evaluated:,} layouts evaluated in {result.search_seconds:.2f} s; "
        f"{result.n_fitting:,} fit ({found.headroom_text()})"
    )
    out += best_lines(found, e.request.tokens)
    line = sensitivity_line(a.sensitivity)
    if line is not None:
        out.append(line)
    out.append(f"checkpoint   {format_bytes(e.checkpoint_bytes)}")
    out.append(f"framework    {a.framework.assumption().removeprefix('framework: ')}")
    if a.reliability is not None:
        out.append(reliability_line(a.reliability))
    if explained:
        out += ["", explain(e, a.to_json()["assumptions"], a.ranked)]
    return out
