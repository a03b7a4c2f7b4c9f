"""docs/check_site.py's checks of rendering bugs Sphinx builds without a warning: a Markdown
table row split by an unescaped ``|``, and an API summary line cut at an abbreviation."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parents[2] / "docs" / "check_site.py"


def check(site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), str(site)], capture_output=True, text=True, timeout=300)


def site_with_source(root: Path, markdown: str) -> Path:
    (root / "index.html").write_text("")
    (root / "_sources").mkdir()
    (root / "_sources" / "decomposition.md.txt").write_text(markdown)
    return root


TABLE = "| piece | what it does |\n|---|---|\n{row}\n\nAfter the table.\n"


def test_a_table_row_with_an_unescaped_pipe_in_a_cell_fails_the_site_check(tmp_path):
    site = site_with_source(tmp_path, TABLE.format(row="| `MeanFieldELBO` | `log p(z) - log q(z|x)` otherwise |"))

    checked = check(site)

    assert checked.returncode == 1
    assert "decomposition.md.txt" in checked.stderr and "line 3: 3 cells, its header 2" in checked.stderr


def test_a_table_whose_pipes_are_escaped_or_in_code_blocks_passes(tmp_path):
    escaped = TABLE.format(row="| `MeanFieldELBO` | `log p(z) - log q(z\\|x)` otherwise |")
    fenced = "```text\n| a | b |\n|---|---|\n| one | two | three |\n```\n"
    assert check(site_with_source(tmp_path, escaped + fenced)).returncode == 0


def test_a_row_with_fewer_cells_than_its_header_fails_too(tmp_path):
    site = site_with_source(tmp_path, "a | b | c\n---|---|---\none | two\n")
    checked = check(site)
    assert checked.returncode == 1 and "2 cells, its header 3" in checked.stderr


AUTOSUMMARY = ('<table class="autosummary longtable docutils align-default"><tbody>'
               '<tr class="row-odd"><td><p><a href="#x"><code>DecompositionELBO</code></a></p></td>\n'
               '<td><p>{}</p></td>\n</tr></tbody></table>')


def test_an_autosummary_line_ending_at_an_abbreviation_fails_the_site_check(tmp_path):
    (tmp_path / "index.html").write_text("")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "infer.html").write_text(
        AUTOSUMMARY.format("The Decomposition VAE's objective (Mathieu et al. 2019, Eq."))

    checked = check(tmp_path)

    assert checked.returncode == 1
    assert "api/infer.html: summaries cut at an abbreviation" in checked.stderr


def test_a_whole_summary_sentence_passes_even_ending_in_letters_of_an_abbreviation(tmp_path):
    (tmp_path / "index.html").write_text("")
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "infer.html").write_text(
        AUTOSUMMARY.format("The Decomposition VAE's objective (Mathieu et al. 2019, Eq. 7).")
        + AUTOSUMMARY.format("Variances that sum to D * pvs."))
    assert check(tmp_path).returncode == 0
