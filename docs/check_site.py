"""Checks of the built documentation site that Sphinx does not make.

    python docs/check_site.py docs/_build/html                       # CI runs this after the build
    python docs/check_site.py docs/_build/html --screenshot parted.html parted.png
    python docs/check_site.py docs/_build/html --math parted.html composing.html

1. No page loads a script from another host (MathJax and everything else is served by the
   site itself, so the pages render offline): exits 1 naming the pages and the scripts.
2. ``--screenshot PAGE PNG``: a headless Chromium (``chromium`` or ``chromium-browser`` on the
   PATH) renders PAGE of the site, scripts and all, into PNG, to see that the math renders.
3. ``--math PAGE ...``: the same browser runs each PAGE's scripts with the network switched
   off and reads back the document: exits 1 naming each page where MathJax typeset no
   formula (no ``mjx-container`` element), e.g. because its script did not load.
4. No signature in the API reference shows a default as a field of a constant
   (``gamma_z=PARTED.gamma_z``) instead of its value: exits 1 naming the pages and defaults.
5. No narrative page (outside ``api/`` and ``_modules/``) shows the full name of an object
   the API reference documents (``ppl_vae.checks.pixel_means``) in code font without a link
   to it: exits 1 naming the pages and names.
6. No Markdown table (in the page sources the site ships, ``_sources/``) has a row whose
   number of cells differs from its header's: an unescaped ``|`` in a cell (``log q(z|x)``)
   splits it, and the renderer drops what no longer fits without a word. Exits 1 naming the
   page, line and counts.
7. No summary line of an API table (autosummary) ends at an abbreviation (``... (Eq.``,
   ``Sec.``, ``App.``): the summary was cut at the abbreviation's full stop. Exits 1 naming
   the pages and lines.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = re.compile(r"<script[^>]*\bsrc=\"([^\"]+)\"", re.IGNORECASE)


def read_pages(site: Path) -> dict[str, str]:
    """The text of every HTML page of the site, by relative path."""
    return {str(page.relative_to(site)): page.read_text(encoding="utf-8", errors="replace")
            for page in sorted(site.rglob("*.html"))}


def remote_scripts(pages: dict[str, str]) -> dict[str, list[str]]:
    """Scripts loaded from another host, by page."""
    found: dict[str, list[str]] = {}
    for page, text in pages.items():
        remote = [src for src in SCRIPT.findall(text) if re.match(r"^(https?:)?//", src)]
        if remote:
            found[page] = remote
    return found


#: A signature's default value as Sphinx renders it.
DEFAULT = re.compile(r'class="default_value"><span class="pre">([^<]*)</span>')
#: A default that hides its value behind a field of a constant (``PARTED.gamma_z``).
CONSTANT_FIELD = re.compile(r"^[A-Z][A-Z0-9_]*\.\w+$")


def hidden_defaults(pages: dict[str, str]) -> dict[str, list[str]]:
    """Defaults shown as a field of a constant rather than a value, by page."""
    found: dict[str, list[str]] = {}
    for page, text in pages.items():
        hidden = [value for value in DEFAULT.findall(text) if CONSTANT_FIELD.match(value)]
        if hidden:
            found[page] = sorted(set(hidden))
    return found


#: An object's entry in the API reference (its anchor is its full name).
DOCUMENTED = re.compile(r'<dt class="sig sig-object py[^"]*" id="(ppl_vae\.[\w.]+)"')
#: A name in code font, with the link around it when there is one.
CODE_NAME = re.compile(r'(<a [^>]*>)?<code class="[^"]*\bliteral\b[^"]*"><span class="pre">([\w.]+?)(?:\(\))?</span></code>')
#: The generated pages: the API reference and the highlighted sources.
GENERATED = ("api/", "_modules/")


def unlinked_names(pages: dict[str, str]) -> dict[str, list[str]]:
    """Full names of documented objects shown in code font without a link, by narrative page."""
    documented = {name for text in pages.values() for name in DOCUMENTED.findall(text)}
    found: dict[str, list[str]] = {}
    for page, text in pages.items():
        if page.startswith(GENERATED):
            continue
        bare = sorted({name for link, name in CODE_NAME.findall(text) if not link and name in documented})
        if bare:
            found[page] = bare
    return found


#: A cell separator of a Markdown table row: a ``|`` not escaped by a backslash.
CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
#: The delimiter row under a Markdown table's header (``|---|:---:|``).
DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def table_cells(row: str) -> int:
    """How many cells the Markdown table row ``row`` has (its outer pipes are optional)."""
    inner = row.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return len(CELL_SEPARATOR.split(inner))


def ragged_table_rows(sources: dict[str, str]) -> dict[str, list[str]]:
    """Rows of Markdown tables whose cell count differs from their header's, by source page
    (fenced code blocks are skipped)."""
    found: dict[str, list[str]] = {}
    for page, text in sources.items():
        lines = text.splitlines()
        in_fence = False
        for number, line in enumerate(lines):
            if line.lstrip().startswith(("```", "~~~")):
                in_fence = not in_fence
            if in_fence or "|" not in line or number + 1 >= len(lines) or not DELIMITER_ROW.match(lines[number + 1]):
                continue
            header = table_cells(line)
            for row_number in range(number + 2, len(lines)):
                row = lines[row_number]
                if "|" not in row or not row.strip():
                    break
                if table_cells(row) != header:
                    found.setdefault(page, []).append(
                        f"line {row_number + 1}: {table_cells(row)} cells, its header {header}")
    return found


def read_sources(site: Path) -> dict[str, str]:
    """The Markdown sources the site ships (``_sources/*.md.txt``), by relative path."""
    sources = site / "_sources"
    return {str(page.relative_to(sources)): page.read_text(encoding="utf-8", errors="replace")
            for page in sorted(sources.rglob("*.md.txt"))} if sources.is_dir() else {}


#: Abbreviations a summary line may not end at (the sentence goes on after them).
ABBREVIATIONS = ("Eq.", "Eqs.", "Sec.", "Secs.", "App.", "Fig.", "Figs.", "Alg.", "Tab.", "Thm.", "Def.",
                 "e.g.", "i.e.", "cf.", "vs.", "et al.", "resp.", "approx.", "No.")
_ABBREVIATION_AT_END = re.compile(r"(?:^|[\s(;,])(?:{})$".format("|".join(map(re.escape, ABBREVIATIONS))))


def ends_at_abbreviation(text: str) -> bool:
    """Whether ``text`` ends with one of :data:`ABBREVIATIONS` (a word of its own: not ``pvs.``)."""
    return bool(_ABBREVIATION_AT_END.search(text.strip()))


#: The summary cell of an autosummary table's row.
SUMMARY_CELL = re.compile(r'<tr class="row-(?:odd|even)"><td>.*?</td>\s*<td><p>(.*?)</p></td>', re.DOTALL)
AUTOSUMMARY = re.compile(r'<table class="autosummary[^"]*">(.*?)</table>', re.DOTALL)
TAG = re.compile(r"<[^>]+>")


def cut_summaries(pages: dict[str, str]) -> dict[str, list[str]]:
    """Autosummary lines that end at an abbreviation, by page."""
    found: dict[str, list[str]] = {}
    for page, text in pages.items():
        for table in AUTOSUMMARY.findall(text):
            for cell in SUMMARY_CELL.findall(table):
                summary = TAG.sub("", cell).strip()
                if ends_at_abbreviation(summary):
                    found.setdefault(page, []).append(summary)
    return found


def _browser_on(site: Path, page: str) -> tuple[str, Path]:
    """The headless browser's executable and the page's file; exits naming what is missing."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on the PATH (Debian: apt-get install chromium)")
    target = (site / page).resolve()
    if not target.is_file():
        raise SystemExit(f"{target}: no such page in the built site")
    return browser, target


#: Chromium's switches: no window, no sandbox (containers), no network (the page must render
#: offline), and 10 s of virtual time for MathJax to typeset.
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--proxy-server=127.0.0.1:9",
            "--virtual-time-budget=10000"]


def screenshot(site: Path, page: str, png: Path, width: int = 1200, height: int = 1800) -> None:
    """Render ``site/page`` with headless Chromium into ``png``, giving MathJax time to typeset."""
    browser, target = _browser_on(site, page)
    subprocess.run([browser, *HEADLESS, f"--window-size={width},{height}", f"--screenshot={png.resolve()}",
                    target.as_uri()], check=True, capture_output=True, timeout=120)


def typeset_formulas(site: Path, page: str) -> int:
    """How many formulas MathJax typeset on ``site/page`` (``mjx-container`` elements of the
    document after its scripts ran in headless Chromium, offline)."""
    browser, target = _browser_on(site, page)
    dom = subprocess.run([browser, *HEADLESS, "--dump-dom", target.as_uri()], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    return dom.count("<mjx-container")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built HTML site (docs/_build/html)")
    parser.add_argument("--screenshot", nargs=2, metavar=("PAGE", "PNG"), help="render PAGE into PNG")
    parser.add_argument("--math", nargs="+", default=[], metavar="PAGE", help="pages whose formulas must typeset")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"{args.site} holds no built site (index.html)")
    pages = read_pages(args.site)
    remote = remote_scripts(pages)
    for page, scripts in remote.items():
        print(f"{page}: loads {', '.join(scripts)} from another host", file=sys.stderr)
    hidden = hidden_defaults(pages)
    for page, values in hidden.items():
        print(f"{page}: defaults shown as {', '.join(values)} instead of their values", file=sys.stderr)
    unlinked = unlinked_names(pages)
    for page, names in unlinked.items():
        print(f"{page}: {', '.join(names)} in code font without a link to its API entry", file=sys.stderr)
    ragged = ragged_table_rows(read_sources(args.site))
    for page, rows in ragged.items():
        print(f"{page}: table rows whose cells differ from the header's: {'; '.join(rows)}", file=sys.stderr)
    cut = cut_summaries(pages)
    for page, summaries in cut.items():
        print(f"{page}: summaries cut at an abbreviation: {' | '.join(summaries)}", file=sys.stderr)
    if args.screenshot:
        screenshot(args.site, args.screenshot[0], Path(args.screenshot[1]))
    untypeset = [page for page in args.math if typeset_formulas(args.site, page) == 0]
    for page in untypeset:
        print(f"{page}: MathJax typeset no formula", file=sys.stderr)
    return 1 if remote or untypeset or hidden or unlinked or ragged or cut else 0


if __name__ == "__main__":
    sys.exit(main())
