"""docs/check_site.py, which CI runs on the built site: a page that loads a script from another
host (MathJax from a CDN) fails the check; scripts served by the site pass."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "docs" / "check_site.py"


def check(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(site)], capture_output=True, text=True, timeout=60)


def test_a_page_loading_mathjax_from_a_cdn_fails_the_site_check(tmp_path):
    (tmp_path / "index.html").write_text('<script defer="defer" src="_static/mathjax/tex-chtml.js"></script>')
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "page.html").write_text(
        '<script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>')

    checked = check(tmp_path)

    assert checked.returncode == 1
    assert "api/page.html" in checked.stderr and "cdn.jsdelivr.net" in checked.stderr


def test_a_site_serving_its_own_scripts_passes(tmp_path):
    (tmp_path / "index.html").write_text('<script defer="defer" src="_static/mathjax/tex-chtml.js"></script>')
    assert check(tmp_path).returncode == 0
