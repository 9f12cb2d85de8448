"""`trainbudget report`: one self-contained HTML page with plots, for a planned run (the
question, the answer, memory, step time, scaling, roofline, failures, assumptions) or for a
training run directory (loss, throughput, step time and memory against the prediction).

Layers, outermost last: `plan_data` gathers the core's numbers and `train.spec.run_files` (the one
reader of a run folder) a run's into frozen dataclasses (pure: no matplotlib, no torch);
`plan_charts` / `run_charts` draw them into PNG bytes on matplotlib's Agg canvas (`run_charts`
also draws `trainbudget plot`'s figure); `page`, `plan_page` and `run_page` assemble the HTML
with the images embedded as data: URIs. Nothing here imports torch or the CLI.
"""
