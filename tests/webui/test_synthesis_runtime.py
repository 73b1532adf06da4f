"""What is shown runs: the Synthesis tab's events that run the model decide their configuration from the runtime
controls as the event sent them, and from the `runtime` state only where it matches them.

A person's pick used to settle (write `runtime`) in a second, chained event outside Gradio's queue, which could land
after a queued "Use the fastest" had set the controls and the state together: the controls then showed the fastest
configuration while the state and the note held the earlier pick. No test can time that; these hold the rules that
make it impossible: a pick sets controls, state and note in one event; every event which reads the state also reads
the controls and runs on what they show (`SynthesisTab.settings_shown`); and a combination the controls show but
that cannot run here is refused with its reason, never replaced by the state's. The tab is built and its real
handlers called with a values dict, without a browser (the browser flows are tests/webui/test_browser_flows.py)."""

from __future__ import annotations

from dataclasses import replace

import gradio as gr
import pytest

from tests.conftest import TINY
from tests.support.event_loop import run_in_fresh_loop

UNKNOWN_PRECISION = "int3"  # refused on every device by every engine: the registry names the reason


@pytest.fixture
def tab(tmp_path, monkeypatch):
    from chattts_lab.serve.context import AppContext
    from chattts_lab.serve.policy import ServingPolicy
    from webui.synthesis.tab import build_synthesis_tab

    monkeypatch.setenv("CHATTTS_LAB_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.setenv("CHATTTS_LAB_HISTORY", str(tmp_path / "history.sqlite"))
    ctx = AppContext.from_env(ServingPolicy(model=TINY))
    with gr.Blocks() as demo:
        ui = build_synthesis_tab(ctx)
    return ctx, ui, demo


def showing(ui, settings, threads=None) -> dict:
    """The runtime controls as they show `settings` (the slider at `threads` when given)."""
    return {ui.device: settings.device, ui.engine: settings.engine, ui.precision: settings.precision,
            ui.threads: settings.threads if threads is None else threads}


def served(ctx):
    from chattts_lab.serve.speech import serving_settings

    return serving_settings(ctx)


def test_the_state_runs_where_the_controls_show_it(tab):
    ctx, ui, _ = tab
    state = served(ctx)
    assert ui.settings_shown({ui.runtime: state, **showing(ui, state)}) is state


def test_the_controls_run_where_the_state_holds_an_earlier_pick(tab):
    """The race's outcome: "Use the fastest" set the controls, a late settle left the state on the pick before."""
    from chattts_lab.serve.runtime import precisions_for

    ctx, ui, _ = tab
    shown = served(ctx)
    other = next(p for p in precisions_for(shown.device, shown.engine) if p != shown.precision)
    earlier_pick = replace(shown, precision=other)
    assert ui.settings_shown({ui.runtime: earlier_pick, **showing(ui, shown)}) == shown
    slower_pick = replace(shown, threads=shown.threads + 1)
    assert ui.settings_shown({ui.runtime: slower_pick, **showing(ui, shown)}) == shown


def test_automatic_threads_match_the_slider_at_its_most_and_no_other_number(tab):
    """A state of None threads (automatic) is shown as max_threads(): kept as None, so the same cached model loads
    (the library's cache keys on the thread count); the slider moved elsewhere is a number of its own."""
    from chattts_lab.serve.runtime import max_threads

    ctx, ui, _ = tab
    automatic = replace(served(ctx), threads=None)
    for most in (max_threads(), float(max_threads())):  # the slider may send a float
        assert ui.settings_shown({ui.runtime: automatic, **showing(ui, automatic, threads=most)}) is automatic
    moved = max_threads() + 1
    assert ui.settings_shown({ui.runtime: automatic, **showing(ui, automatic, threads=moved)}) == replace(
        automatic, threads=moved)


def test_a_combination_that_cannot_run_here_is_refused_with_its_reason(tab):
    from webui.synthesis.form import USER_ERRORS

    ctx, ui, _ = tab
    state = served(ctx)
    values = {ui.runtime: state, **showing(ui, replace(state, precision=UNKNOWN_PRECISION))}
    with pytest.raises(ValueError, match=f"cannot run here: .*unknown precision '{UNKNOWN_PRECISION}'") as refused:
        ui.settings_shown(values)
    assert isinstance(refused.value, USER_ERRORS)  # the handlers' warning for a person's mistake, not a crash


def readers_of_the_state(demo, ui) -> list[tuple[str, set]]:
    """(handler name, inputs) of every event of the tab whose inputs include the `runtime` state."""
    return [(getattr(fn.fn, "__wrapped__", fn.fn).__name__, set(fn.inputs)) for fn in demo.fns.values()
            if fn.fn is not None and ui.runtime in fn.inputs]


def test_every_event_that_reads_the_state_reads_the_controls_that_show_it(tab):
    _, ui, demo = tab
    readers = readers_of_the_state(demo, ui)
    assert {"generate", "show_speaker", "export_card", "save_to_library"} <= {name for name, _ in readers}, readers
    controls = {ui.device, ui.engine, ui.precision, ui.threads}
    for name, inputs in readers:
        assert controls <= inputs, f"{name} reads `runtime` without {sorted(c.elem_id for c in controls - inputs)}"


def values_sent_to(demo, handler: str, ui) -> dict:
    """The values an event of `handler` sends on a page just opened: each of its inputs at its first value."""
    (inputs,) = {frozenset(inputs) for name, inputs in readers_of_the_state(demo, ui) if name == handler}
    return {component: component.value for component in inputs}


def test_generate_warns_of_what_the_controls_show_and_runs_nothing_else(tab):
    """The controls show a combination that cannot run; the state holds one that can: Generate says why and leaves
    the results as they were (before this rule, it ran the state's configuration without a word)."""
    from webui.synthesis.handlers import generate

    ctx, ui, demo = tab
    values = values_sent_to(demo, "generate", ui) | {ui.precision: UNKNOWN_PRECISION, ui.metrics: "as it was"}

    async def updates():
        return [update async for update in generate(ctx, ui, values, None)]

    with pytest.warns(UserWarning, match=f"unknown precision '{UNKNOWN_PRECISION}'"):
        made = run_in_fresh_loop(updates())  # a browser test before this one leaves a loop running
    assert made == [{ui.metrics: "as it was"}]


def test_show_speaker_refuses_what_the_controls_show_when_it_cannot_run(tab):
    from webui.synthesis.voice_handlers import show_speaker

    ctx, ui, demo = tab
    values = values_sent_to(demo, "show_speaker", ui) | {ui.precision: UNKNOWN_PRECISION, ui.voice_seed: 2}
    with pytest.raises(gr.Error, match=f"unknown precision '{UNKNOWN_PRECISION}'"):
        show_speaker(ctx, ui, values)


def test_a_voice_card_refuses_what_the_controls_show_when_it_cannot_run(tab):
    from webui.synthesis.voice_handlers import export_card

    ctx, ui, demo = tab
    values = values_sent_to(demo, "export_card", ui) | {ui.precision: UNKNOWN_PRECISION}
    with pytest.raises(gr.Error, match=f"unknown precision '{UNKNOWN_PRECISION}'"):
        export_card(ctx, ui, values)


def test_every_event_that_sets_the_state_sets_it_with_the_note_and_is_no_chained_second_step(tab):
    """A pick sets the narrowed controls, the state and the note in one event: a second event chained after it
    (`.then`) could land after a queued "Use the fastest" and leave the state and the note on the earlier pick
    while the controls show the fastest configuration."""
    _, ui, demo = tab
    writers = [fn for fn in demo.fns.values() if fn.fn is not None and ui.runtime in fn.outputs]
    names = {getattr(fn.fn, "__wrapped__", fn.fn).__name__ for fn in writers}
    assert {"change_device", "change_engine", "update_settings", "apply_settings"} <= names, names
    controls = {c._id for c in (ui.device, ui.engine, ui.precision, ui.threads)}
    for fn in writers:
        name = getattr(fn.fn, "__wrapped__", fn.fn).__name__
        assert {ui.chosen, ui.in_use} <= set(fn.outputs), f"{name} sets `runtime` without the note"
        if fn.trigger_after is not None:
            parent = demo.fns[fn.trigger_after]
            assert not {target for target, _ in parent.targets} & controls, f"{name} settles a pick as a second step"
