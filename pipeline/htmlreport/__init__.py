"""Report pages: a report's content as data, written as report.md (for people and tools) and report.html (for a
browser: self-contained, opens from file:// with no network), both from the same blocks.

    write_report(md_path, blocks, *, title=None) -> (md, html)    report.md and report.html beside it
    write_html(md_path, blocks, *, title=None) -> html             report.html only (its report.md written already)

    document   the blocks a writer makes (Heading, Paragraph, Items, Table, Figure, Sheet; runs: str, Code, Strong,
               Link)
    writer     the two files, atomically                 markdown  blocks -> Markdown text
    page       blocks -> HTML (Jinja2, autoescaped, CSP)
    embed      reading a picture confined to the folder   sliders   crop sheets -> before/after sliders

No page is made by parsing text: every string a writer passes (a model name, a file name) is escaped as text, and
only files the writer names, inside the report's folder, are embedded.
"""
from pipeline.htmlreport.document import (
    Code,
    Figure,
    Heading,
    Items,
    Link,
    Paragraph,
    Sheet,
    Strong,
    Table,
    items,
    para,
    plot_figure,
    said,
)
from pipeline.htmlreport.markdown import to_lines, to_markdown
from pipeline.htmlreport.writer import write_html, write_report

__all__ = ["Code", "Figure", "Heading", "Items", "Link", "Paragraph", "Sheet", "Strong", "Table", "items", "para",
           "plot_figure", "said", "to_lines", "to_markdown", "write_html", "write_report"]
