"""`trainbudget sample --checkpoint RUN_DIR --prompt TEXT`: continue a prompt with a trained
model (temperature and top-k sampling, seeded), encoded and decoded with its data's tokenizer.
torch is imported inside run() only."""

from __future__ import annotations

import argparse
import math

from trainbudget.cli.args import dumps_json, positive_int
from trainbudget.cli.run.eval_cmd import (
    add_checkpoint_args,
    load_model,
    open_checkpoint,
    open_data_dir,
    pick_device,
)
from trainbudget.core.errors import SpecError

DEFAULT_NEW_TOKENS = 200
LONG_SAMPLE_TOKENS = DEFAULT_NEW_TOKENS
"""Generations longer than this (the default length) show their progress on stderr."""


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    add_checkpoint_args(p)
    p.add_argument("--prompt", required=True, metavar="TEXT", help="the text to continue")
    p.add_argument(
        "--max-new-tokens",
        metavar="N",
        help=f"tokens to generate, at most the model's context (max_seq_len); default "
        f"{DEFAULT_NEW_TOKENS}, or the context where it is shorter",
    )
    p.add_argument(
        "--temperature",
        default="0.8",
        metavar="F",
        help="divides the logits; > 0, lower is more conservative (default 0.8)",
    )
    p.add_argument(
        "--top-k",
        default="0",
        metavar="K",
        help="sample among the K likeliest tokens only (default 0: all)",
    )
    p.add_argument("--seed", default="0", help="seed of the sampling (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON (text and token ids)")


class _Recorder:
    """The tokenizer, remembering the ids it last encoded and decoded (sample returns text)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.encoded: list[int] = []
        self.decoded: list[int] = []

    def encode(self, text: str) -> list[int]:
        self.encoded = list(self.tokenizer.encode(text))
        return self.encoded

    def decode(self, ids) -> str:
        self.decoded = list(ids)
        return self.tokenizer.decode(self.decoded)


def run(args: argparse.Namespace) -> int:
    from trainbudget.cli.interrupt import run_interruptible

    return run_interruptible("sample", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    if args.prompt == "":
        raise SpecError("prompt", args.prompt, "must not be empty (the model continues a text)")
    asked = args.max_new_tokens
    asked = None if asked is None else positive_int("max_new_tokens", asked)
    try:
        temperature = float(args.temperature)
    except ValueError:
        raise SpecError("temperature", args.temperature, "must be a positive number") from None
    if not (math.isfinite(temperature) and temperature > 0):
        raise SpecError("temperature", args.temperature, "must be a positive number")
    top_k = _int("top_k", args.top_k, minimum=0)
    seed = _int("seed", args.seed, minimum=0)

    ckpt = open_checkpoint(args.checkpoint)
    max_new = _length(asked, ckpt.spec.max_seq_len)
    data_dir = open_data_dir(ckpt, args.data)

    from trainbudget.data.tokenizers import load_tokenizer
    from trainbudget.train.evaluate import sample  # imports torch: only when run
    from trainbudget.train.observe.metrics import Progress

    tokenizer = _Recorder(load_tokenizer(data_dir))
    prompt_ids = tokenizer.tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise SpecError("prompt", args.prompt, "encodes to no tokens")
    if max(prompt_ids) >= ckpt.spec.vocab_size:
        raise SpecError(
            "data", str(data_dir), f"tokenizer gives ids the model ({ckpt.spec.vocab_size}) lacks"
        )
    device = pick_device(args.device)
    model = load_model(ckpt, device)
    progress = Progress(max_new, enabled=max_new > LONG_SAMPLE_TOKENS)
    tenth = max(1, max_new // 10)
    try:
        text = sample(
            model,
            tokenizer,
            args.prompt,
            max_new_tokens=max_new,
            temperature=temperature,
            top_k=top_k,
            device=device,
            seed=seed,
            on_token=lambda n: progress.update(n, "new tokens") if n % tenth == 0 else None,
        )
    finally:
        progress.close()
    if args.json:
        ids = tokenizer.decoded
        out = {
            "checkpoint": str(ckpt.dir),
            "step": ckpt.step,
            "prompt": args.prompt,
            "text": text,
            "prompt_tokens": len(prompt_ids),
            "new_tokens": len(ids) - len(prompt_ids),
            "ids": ids,
            "temperature": temperature,
            "top_k": top_k,
            "seed": seed,
        }
        print(dumps_json(out))
        return 0
    print(text)
    return 0


def _length(asked: int | None, context: int) -> int:
    """The tokens to generate: at most the model's context, which bounds the work, and past
    which the model would no longer see the prompt (sampling slides a window of max_seq_len
    tokens); not given: the default, or the context where it is shorter."""
    if asked is None:
        return min(DEFAULT_NEW_TOKENS, context)
    if asked > context:
        raise SpecError(
            "max_new_tokens",
            asked,
            f"must be at most the model's context, max_seq_len ({context}): past it the model "
            "no longer sees the prompt",
        )
    return asked


def _int(field: str, text: str, *, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(field, text, f"must be an integer >= {minimum}") from None
    if value < minimum:
        raise SpecError(field, text, f"must be an integer >= {minimum}")
    return value
