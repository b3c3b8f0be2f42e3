"""Regenerate docs/configuration.md, the gin configuration reference, from the code.

    python -m alf_async.bin.gen_config_docs            # rewrite the file
    python -m alf_async.bin.gen_config_docs --check    # exit 1 if it is stale

Run it after changing a gin-configurable's parameters, defaults or docstring;
tests/test_config_docs.py fails while the committed file is stale.
"""

from __future__ import annotations

import os
import sys
from typing import List

from absl import flags

from alf_async.bin.common import run_command

FLAGS = flags.FLAGS


def default_output() -> str:
    from alf_async.config import PACKAGE_ROOT

    return os.path.join(PACKAGE_ROOT, "docs", "configuration.md")


def define_flags() -> None:
    """The command's flags (defined at start-up, not import)."""
    flags.DEFINE_string("output", None, "file to write (default: docs/configuration.md "
                        "of the project)")
    flags.DEFINE_bool("check", False, "do not write; exit 1 if the file is not current")


def gen_config_docs(output: str, check: bool = False) -> int:
    """Write (or check) the reference; returns the exit status."""
    from alf_async.gin_reference import generate

    text = generate()
    if check:
        try:
            with open(output, encoding="utf-8") as f:
                current = f.read() == text
        except OSError:
            current = False
        if not current:
            print(f"{output} is not current; run python -m alf_async.bin.gen_config_docs",
                  file=sys.stderr)
            return 1
        print(f"{output} is current")
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    with open(output, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {output}")
    return 0


def main(argv: List[str]) -> None:
    if len(argv) > 1:
        print(f"unexpected arguments: {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(2)
    sys.exit(gen_config_docs(FLAGS.output or default_output(), FLAGS.check))


def run_main() -> None:
    define_flags()
    run_command(main)


if __name__ == "__main__":
    run_main()
