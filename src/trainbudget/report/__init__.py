"""`trainbudget report`: one self-contained HTML page with plots, for a planned run (the
question, the answer, memory, step time, scaling, roofline, failures, assumptions) or for a
training run directory (loss, throughput, step time and memory against the prediction).

Layers, outermost last: `plan_data` / `run_data` gather numbers from the core and the run's
files into frozen dataclasses (pure: no matplotlib, no torch); `plan_charts` / `run_charts`
draw them into PNG bytes on matplotlib's Agg canvas; `page`, `plan_page` and `run_page`
assemble the HTML with the images embedded as data: URIs.
"""
