"""trainbudget: parameters, FLOPs, memory and time of transformer training, checked against
PyTorch.

    import trainbudget as tb
    e = tb.estimate("llama-3-70b", tokens="15T", gpus=1024, gpu="h100-sxm", seq_len=8192)
    e.time_days, e.plan.describe(), e.memory.peak_bytes

The API (trainbudget.api) is loaded on first use, so that `import trainbudget` stays a few
milliseconds and imports no numpy or torch (the CLI's start-up and every subprocess pay it)."""

__version__ = "0.1.0"

API_NAMES = frozenset(
    {"estimate", "plan", "Estimate", "Memory", "PlanResult", "Quotes", "SpecError"}
)
"""The names `trainbudget.<name>` resolves from trainbudget.api on first use."""


def __getattr__(name: str):
    if name in API_NAMES:
        import trainbudget.api as api

        return getattr(api, name)
    raise AttributeError(f"module 'trainbudget' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *API_NAMES})
