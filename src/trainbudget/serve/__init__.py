"""`trainbudget serve`: a local planner page. One HTML page, a small script and a style sheet
(package data, no CDN, no build step) served by the standard library's HTTP server, asking a
JSON endpoint that returns exactly the Python API's `to_json()` for the inputs on the page.
Imports: core, api, emit; never torch (the page answers from the estimating core alone)."""
