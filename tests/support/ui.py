"""Small helpers for driving the Gradio 6 DOM the way a person would."""

from __future__ import annotations

import re

LONG = 300_000  # ms: generous, the two cores are shared with other heavy work
PAGE_READY_MS = 120_000  # a page's first load: Gradio builds both tabs


def open_app(context, url: str):
    """A new page of `context` on the app at `url`, once the Synthesis tab can generate."""
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector("#generate", timeout=PAGE_READY_MS)
    return page


def open_accordion(page, label: str) -> None:
    """Open an accordion by its label; one that is open already stays open."""
    header = page.locator("button.label-wrap", has=page.get_by_text(label, exact=True)).first
    if "open" not in (header.get_attribute("class") or "").split():
        header.click()
    page.locator("button.label-wrap.open", has=page.get_by_text(label, exact=True)).first.wait_for()


def set_number(page, elem_id: str, value) -> None:
    """Type into a Number or a Slider's number box and commit it."""
    box = page.locator(f"#{elem_id} input[type=number]").first
    box.fill(str(value))
    box.press("Tab")


def set_text(page, elem_id: str, value) -> None:
    """Type into a Textbox and commit it."""
    box = page.locator(f"#{elem_id} input, #{elem_id} textarea").first
    box.fill(str(value))
    box.press("Tab")


def wait_toast(page, pattern: str, timeout: int = LONG):
    toast = page.locator(".toast-body").filter(has_text=re.compile(pattern))
    toast.first.wait_for(timeout=timeout)
    return toast.first.inner_text()


def close_toasts(page) -> None:
    for btn in page.locator(".toast-close").all():
        try:
            btn.click(timeout=2000)
        except Exception:  # a toast may vanish by itself meanwhile
            pass


def no_error_badges(page, *elem_ids: str) -> None:
    """Gradio marks each output of a failed event with an "Error" badge; a mistake must leave them as they were."""
    from playwright.sync_api import expect

    for elem_id in elem_ids:
        expect(page.locator(f"#{elem_id} .error")).to_have_count(0)


def audio_href(page, elem_id: str = "audio") -> str | None:
    links = page.locator(f"#{elem_id} a[href*='.wav']")
    return links.first.get_attribute("href") if links.count() else None


def wait_new_audio(page, previous: str | None = None, elem_id: str = "audio", timeout: int = LONG) -> str:
    """Wait until the player offers a wav other than `previous` (each result is a new file); return its link."""
    selector = f"#{elem_id} a[href*='.wav']" + (f':not([href="{previous}"])' if previous else "")
    link = page.locator(selector).first
    link.wait_for(timeout=timeout)
    return link.get_attribute("href")


def pick_option(page, elem_id: str, pattern: str) -> None:
    """Open a Dropdown and choose the option whose text matches."""
    page.locator(f"#{elem_id} input").first.click()
    page.get_by_role("option", name=re.compile(pattern)).first.click()
    page.keyboard.press("Escape")


def row_count(page, elem_id: str) -> int:
    """Rows of a Gradio 6 table (it renders only visible rows; aria-rowcount counts them all, header included)."""
    grid = page.locator(f"#{elem_id} [aria-rowcount]").first
    if not grid.count():
        return page.locator(f"#{elem_id} tbody tr").count()
    return int(grid.get_attribute("aria-rowcount")) - 1


def open_tab(page, *names: str) -> None:
    for name in names:
        page.get_by_role("tab", name=name, exact=True).click()


# The Synthesis tab

def generate(page, text: str, tokens: int = 24, min_tokens: int = 0) -> None:
    page.fill("#text textarea", text)
    open_accordion(page, "Sampling")
    set_number(page, "max-new-token", tokens)
    set_number(page, "min-new-token", min_tokens)  # random weights stop at random; this holds them to it
    page.click("#generate")


def wait_result(page, timeout: int = LONG) -> str:
    page.locator("#metrics").filter(has_text="Latency").wait_for(timeout=timeout)
    return page.locator("#metrics").inner_text()


# Tables and sweeps (Benchmark tab)

SWEEP_TIMEOUT = 1_200_000  # ms: the first lab cell on a machine also builds the lab's C++ kernels
# Every row of a Gradio 6 table as {header: text}, or null while the virtual table has not rendered them all.
TABLE_JS = """(id) => {
  const grid = document.querySelector(`#${id} [role=grid]`);
  if (!grid) return null;
  const heads = [...grid.querySelectorAll('th[role=columnheader]')].map(th => th.getAttribute('title'));
  const rows = [...grid.querySelectorAll('[role=row].virtual-row')]
    .map(r => [...r.querySelectorAll('[role=gridcell]')].map(c => c.innerText.trim()));
  const total = Number(grid.getAttribute('aria-rowcount')) - 1;
  return rows.length === total && rows.every(r => r.length === heads.length) ? {heads, rows} : null;
}"""


def table_rows(page, elem_id: str, at_least: int = 0) -> list[dict[str, str]]:
    """The table's rows once it has rendered `at_least` of them (a table can render before the update that fills it)."""
    js = f"(a) => {{ const t = ({TABLE_JS})(a.id); return t && t.rows.length >= a.n ? t : null; }}"
    data = page.wait_for_function(js, arg={"id": elem_id, "n": at_least}, timeout=LONG).json_value()
    return [dict(zip(data["heads"], row)) for row in data["rows"]]


def wait_for_row(page, elem_id: str, column: str, value: str) -> dict[str, str]:
    """The first row whose `column` reads `value`, once the table shows one."""
    js = f"""(a) => {{
      const t = ({TABLE_JS})(a.id);
      const row = t && t.rows.find(r => r[t.heads.indexOf(a.column)] === a.value);
      return row ? Object.fromEntries(t.heads.map((h, i) => [h, row[i]])) : null;
    }}"""
    return page.wait_for_function(js, arg={"id": elem_id, "column": column, "value": value}, timeout=LONG).json_value()


def finished_sweep_id(page, pattern: str) -> int:
    status = page.locator("#sw-status").filter(has_text=re.compile(pattern))
    status.wait_for(timeout=SWEEP_TIMEOUT)
    return int(re.search(r"Sweep (\d+)", status.inner_text()).group(1))
