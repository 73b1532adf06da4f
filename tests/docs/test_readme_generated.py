"""The README's tables that the code writes (scripts/readme.py): each generated block holds exactly what the code
generates now, so a limit, a default or a precision changed in the code fails here until the page is rewritten."""

from __future__ import annotations

import pytest

from scripts import readme

PAGES = {page: (readme.ROOT / page).read_text(encoding="utf-8") for page in readme.PAGES}
SHOWN = [(page, name, body) for page, text in PAGES.items() for name, body in readme.blocks_in(text).items()]


@pytest.mark.parametrize("name", sorted(readme.BLOCKS))
def test_each_generated_block_is_what_the_code_writes_now(name):
    pages = [(page, body) for page, shown, body in SHOWN if shown == name]
    assert pages, f"no <!-- generated:{name} --> block in {', '.join(readme.PAGES)}"
    stale = [page for page, body in pages if body != readme.BLOCKS[name]()]
    assert stale == [], f"{', '.join(stale)}: the {name} table is stale: run `python -m scripts.readme`"


def test_a_stale_block_is_seen_and_rewritten():
    stale = "a\n<!-- generated:limits -->\n| old |\n<!-- /generated:limits -->\nb\n"
    fresh = readme.rewritten(stale)
    assert readme.blocks_in(fresh) == {"limits": readme.limits()} and fresh.startswith("a\n") and fresh.endswith("b\n")
    with pytest.raises(KeyError, match="no generated block named 'nothing'"):
        readme.rewritten("<!-- generated:nothing -->\n<!-- /generated:nothing -->")
