"""Checks of the built documentation site that Sphinx does not make.

    python docs/check_site.py docs/_build/html                       # CI runs this after the build
    python docs/check_site.py docs/_build/html --screenshot parted.html parted.png

1. No page loads a script from another host (MathJax and everything else is served by the
   site itself, so the pages render offline): exits 1 naming the pages and the scripts.
2. ``--screenshot PAGE PNG``: a headless Chromium (``chromium`` or ``chromium-browser`` on the
   PATH) renders PAGE of the site, scripts and all, into PNG, to see that the math renders.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = re.compile(r"<script[^>]*\bsrc=\"([^\"]+)\"", re.IGNORECASE)


def remote_scripts(site: Path) -> dict[str, list[str]]:
    """Scripts loaded from another host, by page (relative path)."""
    found: dict[str, list[str]] = {}
    for page in sorted(site.rglob("*.html")):
        remote = [src for src in SCRIPT.findall(page.read_text(encoding="utf-8", errors="replace"))
                  if re.match(r"^(https?:)?//", src)]
        if remote:
            found[str(page.relative_to(site))] = remote
    return found


def screenshot(site: Path, page: str, png: Path, width: int = 1200, height: int = 1800) -> None:
    """Render ``site/page`` with headless Chromium into ``png``, giving MathJax time to typeset."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        raise SystemExit("no chromium on the PATH (Debian: apt-get install chromium)")
    target = (site / page).resolve()
    if not target.is_file():
        raise SystemExit(f"{target}: no such page in the built site")
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}",
         "--virtual-time-budget=10000", f"--screenshot={png.resolve()}", target.as_uri()],
        check=True, capture_output=True, timeout=120,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built HTML site (docs/_build/html)")
    parser.add_argument("--screenshot", nargs=2, metavar=("PAGE", "PNG"), help="render PAGE into PNG")
    args = parser.parse_args(argv)
    if not (args.site / "index.html").is_file():
        parser.error(f"{args.site} holds no built site (index.html)")
    remote = remote_scripts(args.site)
    for page, scripts in remote.items():
        print(f"{page}: loads {', '.join(scripts)} from another host", file=sys.stderr)
    if args.screenshot:
        screenshot(args.site, args.screenshot[0], Path(args.screenshot[1]))
    return 1 if remote else 0


if __name__ == "__main__":
    sys.exit(main())
