"""Score this machine's GPU in one command (`make gpu-check` runs it): writes OUTPUT/scoreboard.json section by
section (pipeline.bench.scoreboard; a run cut short keeps what it measured) and prints its table. Without a GPU
every section says "skipped: <reason>". Exit 1 when a section failed with an error, else 0 (goals missed are shown,
not failed: they are measurements).

    PYTHONPATH=. python3 scripts/gpu_scoreboard.py [--output outputs/gpu-check] [--only models video ...] [--show]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.bench.gpu_scoreboard import sections
from pipeline.bench.scoreboard import Scoreboard, table


def main(argv: list[str] | None = None) -> int:
    every = sections()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=Path("outputs/gpu-check"))
    parser.add_argument("--only", nargs="+", choices=list(every), help="run these sections only")
    parser.add_argument("--show", action="store_true", help="print the table of OUTPUT/scoreboard.json, run nothing")
    args = parser.parse_args(argv)
    if args.show:
        path = args.output / "scoreboard.json"
        if not path.is_file():
            print(f"gpu scoreboard: {path} does not exist (run this without --show first)", file=sys.stderr)
            return 2
        print(table(json.loads(path.read_text())))
        return 0
    board = Scoreboard(args.output / "scoreboard.json")
    for name, section in sections(log=lambda msg: print(msg, flush=True)).items():
        if args.only is None or name in args.only:
            board.run(name, section, log=lambda msg: print(msg, flush=True))
    print(table(board.doc))
    print(f"(written to {board.path})")
    return 1 if any("error" in part for part in board.doc["sections"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
