"""`python -m pipeline.recipes [NAME ...] [--list] [--out DIR]`: list or run the tutorial's recipes."""
from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

from pipeline.recipes import RECIPES, load


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.recipes", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"recipes to run (default: all): {', '.join(RECIPES)}")
    parser.add_argument("--list", action="store_true", help="list the recipes and exit")
    parser.add_argument("--out", type=Path, default=None,
                        help="also save each recipe's ONNX models in this directory (for Netron)")
    args = parser.parse_args(argv)

    if args.list:
        width = max(map(len, RECIPES))
        for name, what in RECIPES.items():
            print(f"{name:<{width}}  {what}")
        return 0
    unknown = [n for n in args.names if n not in RECIPES]
    if unknown:
        print(f"error: unknown recipe {', '.join(unknown)} (known: {', '.join(RECIPES)})",
              file=sys.stderr)
        return 2

    results = []
    for name in args.names or list(RECIPES):
        start = time.perf_counter()
        try:
            load(name).main(args.out)
            ok = True
        except Exception:  # report every recipe, then fail at the end
            traceback.print_exc()
            ok = False
        results.append((name, ok, time.perf_counter() - start))
        print()
    for name, ok, seconds in results:
        print(f"{'ok  ' if ok else 'FAIL'} {name:<14} {seconds:6.1f} s")
    return 0 if all(ok for _, ok, _ in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
