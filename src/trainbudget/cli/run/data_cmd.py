"""`trainbudget data prepare`: text sources -> train.bin / val.bin token memmaps + meta.json.

numpy (and the optional `tokenizers` library) are imported inside run() only, so --help and the
other commands stay fast.
"""

from __future__ import annotations

import argparse
import sys

from trainbudget.cli.args import OneLineParser, dumps_json, positive_int
from trainbudget.core.errors import SpecError

PREPARE_HELP = "tokenize text sources into train.bin / val.bin memmaps and a meta.json sidecar"


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    actions = p.add_subparsers(dest="action", metavar="ACTION", parser_class=OneLineParser)
    prep = actions.add_parser("prepare", help=PREPARE_HELP, description=PREPARE_HELP)
    prep.add_argument(
        "sources",
        nargs="*",
        metavar="SOURCE",
        help="[NAME=]PATH[:WEIGHT]: a text file, a folder (its *.txt and *.md, recursively) or "
        "a .jsonl file; NAME defaults to the file stem, WEIGHT (the mixture) to 1. "
        "None: the embedded corpus, Python's reference documentation (python-docs)",
    )
    prep.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    prep.add_argument(
        "--tokenizer",
        default="byte",
        metavar="T",
        help="byte (default; 257 ids), bpe (trained on the sources; needs `tokenizers`) "
        "or the path of a Hugging Face tokenizer.json",
    )
    prep.add_argument("--vocab-size", metavar="N", help="BPE vocabulary size (default 4096)")
    prep.add_argument(
        "--val-fraction",
        default="0.05",
        metavar="F",
        help="fraction of each source's documents held out, in [0, 0.5] (default 0.05)",
    )
    prep.add_argument(
        "--text-field",
        metavar="NAME",
        help="JSONL key holding the text (default text; .jsonl sources only)",
    )
    prep.add_argument("--seed", default="0", help="seed of the held-out choice (default 0)")
    prep.add_argument(
        "--allow-binary",
        action="store_true",
        help="tokenize files that look binary (a NUL byte or bytes that are not UTF-8 in the "
        "first 8 KiB) as text; refused by default",
    )
    prep.add_argument("--json", action="store_true", help="print meta.json as written")


def run(args: argparse.Namespace) -> int:
    if args.action != "prepare":
        sys.stderr.write("trainbudget data: error: give an action: prepare (see --help)\n")
        return 2
    vocab_size = None if args.vocab_size is None else positive_int("vocab_size", args.vocab_size)
    try:
        val_fraction = float(args.val_fraction)
    except ValueError:
        raise SpecError("val_fraction", args.val_fraction, "must be a number in [0, 0.5]") from None
    try:
        seed = int(args.seed)
    except ValueError:
        seed = -1
    if seed < 0:  # numpy's generators take none below zero
        raise SpecError("seed", args.seed, "must be an integer >= 0")
    if not args.out.strip():
        raise SpecError("out", args.out, "must name a folder (it is created)")
    _check_text_field(args)

    from trainbudget.data.prepare import prepare

    meta = prepare(
        args.sources,
        args.out,
        tokenizer=args.tokenizer,
        vocab_size=vocab_size,
        val_fraction=val_fraction,
        seed=seed,
        text_field=args.text_field or "text",
        progress=_progress,
        allow_binary=args.allow_binary,
    )
    if args.json:
        print(dumps_json({"out": args.out, **meta}))
    else:
        _print_text(args.out, meta)
    return 0


def _check_text_field(args: argparse.Namespace) -> None:
    """--text-field names a key of JSONL objects: given with no JSONL source, it would do
    nothing."""
    if args.text_field is None:
        return
    from trainbudget.data.sources import parse_source

    if not any(parse_source(s).kind == "jsonl" for s in args.sources):
        raise SpecError(
            "text_field",
            args.text_field,
            "applies to .jsonl sources only, and none is given (text files are read whole)",
        )


def _progress(line: str) -> None:
    sys.stderr.write(f"data prepare: {line}\n")
    sys.stderr.flush()


def _print_text(out: str, meta: dict) -> None:
    tok = meta["tokenizer"]
    tok_text = tok["kind"] + (f" ({tok['file']})" if tok["file"] else "")
    print(f"wrote {out}: tokenizer {tok_text}, vocab {meta['vocab_size']:,}, {meta['dtype']}")
    print(f"{'source':<20} {'weight':>7} {'train tokens':>14} {'val tokens':>12} {'held out':>10}")
    for s in meta["sources"]:
        print(
            f"{s['name']:<20} {s['weight']:>7g} {s['tokens']['train']:>14,} "
            f"{s['tokens']['val']:>12,} {s['held_out']:>10}"
        )
    t, d = meta["tokens"], meta["documents"]
    print(f"{'total':<20} {'':>7} {t['train']:>14,} {t['val']:>12,}")
    print(f"documents: {d['train']:,} train, {d['val']:,} held out")
