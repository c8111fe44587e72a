"""The merged `--summary` of a Ray run, built as records arrive: counts and failures in memory, the per-image
records in a spool file next to the summary, joined into one JSON document at the end. So the driver's memory
does not grow with the number of images."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from pipeline.artifacts.atomic import atomic_path

REFERENCE_KEYS = ("psnr", "ssim", "psnr_bicubic", "ssim_bicubic")  # as pipeline.sr's summary


class SummarySpool:
    def __init__(self, summary: str | Path | None):
        self.path = Path(summary) if summary else None
        self.counts = {"ok": 0, "failed": 0, "skipped": 0}
        self.failures: list[dict] = []
        self.out_mpix = 0.0
        self.scores = dict.fromkeys(REFERENCE_KEYS, 0.0)
        self.scored = 0
        self._spool = None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".spool", dir=self.path.parent)
            os.unlink(name)  # anonymous: gone with the process, whatever happens
            self._spool = os.fdopen(fd, "w+")

    def add(self, record: dict) -> None:
        status = record["status"]
        self.counts[status] = self.counts.get(status, 0) + 1
        if status == "failed":
            self.failures.append({"input": record["input"], "reason": record.get("reason", "")})
        elif status == "ok" and record.get("out_size"):
            w, h = record["out_size"]
            self.out_mpix += w * h / 1e6
            if "psnr" in record:  # scored against --reference
                self.scored += 1
                for k in REFERENCE_KEYS:
                    self.scores[k] += record[k]
        if self._spool is not None:
            self._spool.write(json.dumps(record) + "\n")

    @property
    def reference(self) -> dict | None:
        """Mean scores over the images that had a reference, as the local summary's `reference`."""
        if not self.scored:
            return None
        return {**{k: v / self.scored for k, v in self.scores.items()}, "images": self.scored}

    def write(self, header: dict, ignored: list[str]) -> None:
        """header: the run's settings and totals (the local summary's keys); then images, failures, ignored."""
        if self.path is None:
            return
        head = {**header, "counts": {**self.counts, "ignored": len(ignored)}}
        if self.reference:
            head["reference"] = self.reference
        self._spool.flush()
        self._spool.seek(0)
        with atomic_path(self.path) as tmp, open(tmp, "w") as f:
            f.write(json.dumps(head, indent=2)[:-2] + ',\n  "images": [')
            for i, line in enumerate(self._spool):
                f.write(("," if i else "") + "\n    " + line.rstrip("\n"))
            f.write("\n  ],\n")
            tail = json.dumps({"failures": self.failures, "ignored": ignored}, indent=2)
            f.write(tail[2:])
            f.write("\n")

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
