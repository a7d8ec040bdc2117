"""The `fusegraph` command: argument parsing, dispatch, and turning errors into one line and an exit code.

Exit codes: 0 success; 1 `verify` found a mismatch; 2 a user error (bad model, input or option:
one line `fusegraph: error: ...` on stderr); 3 an internal error (a bug: one line, the traceback with
--debug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ..errors import FusegraphError, InternalError
from .commands import COMMANDS

PROG = "fusegraph"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # one line like every other user error, pointing at the help instead of dumping the usage
        _fail(f"{message} (see '{self.prog} --help')")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = _Parser(prog=PROG, description="fusegraph: an ONNX inference compiler and runtime.",
                     epilog=f"Run '{PROG} COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    parser.add_argument("--custom-ops", action="append", default=[], metavar="MODULE",
                        help="import this module (a dotted name or a .py file) first: the custom ops it defines "
                             "(fusegraph.custom_op) parse, run, load and verify; repeatable")
    # The subcommands accept --debug too; SUPPRESS keeps them from resetting the top-level value.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=_Parser)
    sub.required = True
    for name, module in COMMANDS.items():
        p = sub.add_parser(name, help=module.HELP, description=module.HELP[:1].upper() + module.HELP[1:] + ".",
                           parents=[debug])
        module.add_arguments(p)
        p.set_defaults(func=module.run)
    return parser


def _fail(message: str) -> None:
    # messages from ORT or numpy may span lines; the contract is one line
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)


def _describe(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e) or type(e).__name__


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version and usage errors end here
        return e.code if isinstance(e.code, int) else 2
    try:
        for spec in args.custom_ops:
            from ..custom.loading import load_custom_ops

            load_custom_ops(spec)
        return int(args.func(args))
    except InternalError as e:  # a bug caught at the API boundary: report the original
        return _internal(e.__cause__ or e, args.debug)
    except (FusegraphError, OSError) as e:  # user errors: the model, an input, a path
        if isinstance(e, BrokenPipeError):  # `fusegraph read big.onnx | head`
            sys.stderr.close()
            return 0
        if args.debug:
            traceback.print_exc()
        _fail(_describe(e))
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a bug in fusegraph: still one line unless asked, but say it is one
        return _internal(e, args.debug)


def _internal(e: BaseException, debug: bool) -> int:
    if debug:
        traceback.print_exception(e)
    print(f"{PROG}: internal error: {type(e).__name__}: {' '.join(str(e).split())} "
          f"(a bug in fusegraph; --debug shows the traceback)", file=sys.stderr)
    return 3
