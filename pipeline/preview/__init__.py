"""`preview`: before a long job, every backend x precision on samples of the user's own input, side by side, with
the time and size the whole job will take and the command to run it.

    prepare(PreviewOptions) -> Prepared    every argument checked, INPUT read from its headers (before any work)
    preview(Prepared) -> Outcome           samples taken, each candidate measured, judged and ranked
    write(Outcome) -> paths                report.json, report.md, report.html;  terminal(outcome, paths): the lines

    inputs    INPUT's images and clips, sized from headers; the image samples    video     clips' sample runs (PyAV)
    measure   one candidate: loaded as sr loads it, sr run on the samples         estimate  whole-job time and size
    verdict   failed / over budget / within budget / recommended (the quality gate)   run   the flow
    report    the pages and the terminal's table
"""
from pipeline.preview.report import terminal, write
from pipeline.preview.run import OUTPUT_PLACEHOLDER, Outcome, Prepared, PreviewOptions, prepare, preview

__all__ = ["OUTPUT_PLACEHOLDER", "Outcome", "Prepared", "PreviewOptions", "prepare", "preview", "terminal", "write"]
