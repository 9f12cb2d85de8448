"""Run the CLI in-process and capture what a user would see."""

from __future__ import annotations

import contextlib
import io
import json

from trainbudget.cli.main import main


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse exits on its own errors and on --help
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv: str) -> dict:
    code, out, err = cli(*argv, "--json")
    assert code == 0, err
    return json.loads(out)


def one_line_error(argv: tuple[str, ...]) -> str:
    """The single stderr line of a refused command (exit 2, nothing on stdout)."""
    code, out, err = cli(*argv)
    assert code == 2, (code, out, err)
    assert out == "" and "Traceback" not in err
    assert err.count("\n") == 1, err
    return err.strip()
