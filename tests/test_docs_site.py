"""docs/check_site.py, which CI runs on the built site: a page that loads a script from another
host (MathJax from a CDN) fails the check; scripts served by the site pass; a documented
name in code font on a narrative page without a link fails it; with a headless
Chromium, a formula typesets offline from the MathJax the site serves, and a page whose
MathJax cannot load fails ``--math``."""
from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[1] / "docs" / "check_site.py"


def check(site: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(site), *options], capture_output=True, text=True, timeout=300)


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


def test_a_signature_showing_a_default_as_a_constant_field_fails_the_site_check(tmp_path):
    (tmp_path / "index.html").write_text("")
    (tmp_path / "api").mkdir()
    value = '<em class="sig-param"><span class="n"><span class="pre">{}</span></span><span class="o"><span class="pre">=</span></span><span class="default_value"><span class="pre">{}</span></span></em>'
    (tmp_path / "api" / "shown.html").write_text(value.format("gamma_z", "50.0") + value.format("activation", "nn.ReLU"))
    assert check(tmp_path).returncode == 0
    (tmp_path / "api" / "hidden.html").write_text(value.format("gamma_z", "PARTED.gamma_z"))

    checked = check(tmp_path)

    assert checked.returncode == 1
    assert "api/hidden.html" in checked.stderr and "PARTED.gamma_z" in checked.stderr
    assert "shown.html" not in checked.stderr


def test_a_documented_name_in_code_font_without_a_link_fails_the_site_check(tmp_path):
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "checks.html").write_text(
        '<dt class="sig sig-object py" id="ppl_vae.checks.pixel_means">'
        '<code class="docutils literal notranslate"><span class="pre">ppl_vae.checks.pixel_means</span></code>')
    code = '<code class="docutils literal notranslate"><span class="pre">{}</span></code>'
    linked = '<a class="reference internal" href="api/checks.html#ppl_vae.checks.pixel_means">{}</a>'
    (tmp_path / "index.html").write_text(linked.format(code.format("ppl_vae.checks.pixel_means")) + code.format("metrics.csv"))
    assert check(tmp_path).returncode == 0
    (tmp_path / "criticism.html").write_text(code.format("ppl_vae.checks.pixel_means()"))

    checked = check(tmp_path)

    assert checked.returncode == 1
    assert "criticism.html: ppl_vae.checks.pixel_means in code font without a link" in checked.stderr
    assert "index.html" not in checked.stderr and "api/" not in checked.stderr


def served_mathjax(site: Path) -> None:
    """Copy the MathJax of the docs' sphinx-mathjax-offline package into ``site/_static/mathjax``."""
    try:
        files = importlib.metadata.files("sphinx-mathjax-offline") or []
    except importlib.metadata.PackageNotFoundError:
        files = []
    entry = next((f for f in files if str(f).endswith("static/mathjax/tex-chtml.js")), None)
    if entry is None:
        pytest.skip("sphinx-mathjax-offline (the docs extra) is not installed")
    shutil.copytree(Path(entry.locate()).parent, site / "_static" / "mathjax")


@pytest.mark.skipif(shutil.which("chromium") is None and shutil.which("chromium-browser") is None,
                    reason="no headless chromium")
def test_a_formula_typesets_offline_and_a_page_without_its_mathjax_fails_the_math_check(tmp_path):
    served_mathjax(tmp_path)
    script = '<script defer="defer" src="{}_static/mathjax/tex-chtml.js"></script>'
    (tmp_path / "index.html").write_text("<html><head>" + script.format("") + "</head><body>x</body></html>")
    (tmp_path / "math.html").write_text(
        "<html><head>" + script.format("") + r"</head><body><p>\(\mathcal{L} = -E_q[\log p(x \mid z)]\)</p></body></html>")
    (tmp_path / "broken.html").write_text(
        "<html><head>" + script.format("missing/") + r"</head><body><p>\(x^2\)</p></body></html>")

    assert check(tmp_path, "--math", "math.html").returncode == 0
    failed = check(tmp_path, "--math", "math.html", "broken.html")
    assert failed.returncode == 1 and "broken.html: MathJax typeset no formula" in failed.stderr
    assert "math.html:" not in failed.stderr
