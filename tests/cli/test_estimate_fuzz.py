"""`estimate` over seeded random layouts, frameworks, precisions and kernel flags: every answer
is an answer (a positive step time and peak, an MFU in (0, 0.95)) or the one-line refusal of a
rule it breaks; never a traceback, never a silent nonsense figure."""

from __future__ import annotations

import json
import random

import pytest

from clirun import cli

MODELS = ("gpt2", "gpt3-125m", "llama-3-8b", "llama-3-70b", "mixtral-8x7b", "deepseek-v3",
          "qwen3-8b", "gemma-2-9b", "gemma-3-1b", "mistral-7b")  # fmt: skip
GPUS = ("h100-sxm", "h200", "b200", "a100-80gb", "h800", "mi300x", "h100-pcie", "a100-40gb")
FRAMEWORKS = ("generic", "megatron", "torchtitan", "deepspeed", "pytorch-fsdp1", "nemo-2",
              "megatron-bridge-perf", "kempnerforge", "nanotron", "trainbudget")  # fmt: skip
PRECISIONS = ("bf16-mixed", "fp8", "bf16", "amp-bf16", "fp16-mixed")
RECIPES = ("te-delayed", "te-current", "te-mxfp8", "torchao-tensorwise", "torchao-rowwise")
MOE = ("mixtral-8x7b", "deepseek-v3")


def random_question(rng: random.Random) -> list[str]:
    model = rng.choice(MODELS)
    dp, tp = rng.choice((1, 2, 8, 64)), rng.choice((1, 2, 4, 8))
    pp, cp = rng.choice((1, 1, 2, 4)), rng.choice((1, 1, 2, 4))
    mb, accumulation = rng.choice((1, 2, 4)), rng.choice((1, 2, 8, 32))
    argv = ["estimate", "--model", model, "--gpu", rng.choice(GPUS)]
    argv += ["--gpus", str(dp * tp * pp * cp), "--dp", str(dp), "--tp", str(tp)]
    argv += ["--pp", str(pp), "--cp", str(cp), "--micro-batch", str(mb)]
    argv += ["--global-batch", str(mb * accumulation * dp)]
    argv += ["--seq-len", str(rng.choice((1024, 4096, 8192, 32768, 131072)))]
    precision = rng.choice(PRECISIONS)
    argv += ["--framework", rng.choice(FRAMEWORKS), "--precision", precision]
    argv += ["--zero", str(rng.choice((0, 1, 2, 3)))]
    argv += ["--recompute", rng.choice(("none", "selective", "full", "selective-op"))]
    if model in MOE and rng.random() < 0.5:
        argv += ["--ep", str(rng.choice((2, 8)))]
    optional = (
        (tp > 1, ["--sp"]),
        (pp > 1, ["--vpp", "2"]),
        (True, ["--compiled"]),
        (True, ["--tp-comm-overlap"]),
        (True, ["--attention-kernel", rng.choice(("flash1", "flash2", "flash3", "cudnn"))]),
        (precision == "fp8", ["--fp8-recipe", rng.choice(RECIPES)]),
    )
    for allowed, flags in optional:
        if allowed and rng.random() < 0.25:
            argv += flags
    return [*argv, "--json"]


@pytest.mark.parametrize("seed", range(4))
def test_random_questions_get_an_answer_or_a_one_line_refusal(seed):
    rng = random.Random(seed)
    answered = 0
    for _ in range(60):
        argv = random_question(rng)
        code, out, err = cli(*argv)
        assert "Traceback" not in err, " ".join(argv)
        assert code in (0, 2), (code, " ".join(argv), err)
        if code == 2:
            assert out == "" and err.count("\n") == 1, (" ".join(argv), err)
            continue
        answered += 1
        doc = json.loads(out)
        assert doc["step_seconds"] > 0 and doc["memory_bytes"]["total"] > 0, " ".join(argv)
        assert 0 < doc["mfu"] < 0.95, (doc["mfu"], " ".join(argv))
    assert answered >= 20  # the rules refuse some; most questions are answered
