"""Synthesis tab: try voices in a browser. The components by name, one builder per panel, then the wiring.

The handlers live apart: webui/synthesis/handlers.py (generate, runtime, the API) and webui/synthesis/voice_handlers.py
(voices and cards); the form's values and the request they make are webui/synthesis/form.py."""

from __future__ import annotations

import gradio as gr

from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND
from chattts_lab.requests import MAX_NEW_TOKEN
from chattts_lab.voices import PRESET_VOICES, saved_card_names
from webui.i18n.texts import t
from chattts_lab.serve.context import AppContext
from webui.common.events import MODEL_QUEUE, SYNTHESIS_QUEUE, bind
from chattts_lab.serve.runtime import CHOSEN, ServingChoice, default_settings, devices, engines_for, max_threads, precisions_for
from webui.synthesis.form import DEFAULT_REFINE, DEFAULT_REQUEST, DEFAULT_SAMPLING, VOICE_MODES, SynthesisTab
from webui.synthesis.handlers import (api_synthesize, apply_settings, change_device, change_engine, generate,
                                      fastest_label, fastest_offer, in_use_note, interrupt, live_playback,
                                      stream_players, update_settings)
from webui.synthesis.voice_handlers import (export_card, import_card, pick_preset, pick_saved, roll_dice, sample_uploaded,
                                  save_to_library, show_speaker)

__all__ = ["SynthesisTab", "apply_settings", "build_synthesis_tab"]

EXAMPLES = [
    ["四川美食确实以辣闻名，但也有不辣的选择。比如甜水面、赖汤圆、蛋烘糕、叶儿粑等，这些小吃口味温和，甜而不腻，也很受欢迎。"],
    ["Hello! This is ChatTTS Lab. It measures how fast text to speech runs on the machine in front of you."],
    ["我最近在学 English，每天 practice 半个小时 [uv_break] 感觉进步还挺明显的。"],
    ["That joke was so bad [laugh] that I had to hear it twice [uv_break] and it got worse."],
]


def build_synthesis_tab(ctx: AppContext) -> SynthesisTab:
    serving = ctx.serving or ServingChoice(default_settings(), "the defaults")
    c = {"runtime": gr.State(serving.settings), "chosen": gr.State(serving.reason.startswith(CHOSEN)),
         "imported_code": gr.State(None)}
    with gr.Row():
        with gr.Column(scale=3):
            _text_panel(c)
            _voice_panel(c, ctx.voices_dir)
            _card_panel(c)
            _sampling_panel(c)
            _runtime_panel(c, serving)
        with gr.Column(scale=2):
            _results_panel(c)
    ui = SynthesisTab(**c)
    _wire(ctx, ui)
    _build_api(ctx)
    return ui


# Each panel builder adds its components to `c` under their SynthesisTab field names.


def _text_panel(c: dict) -> None:
    c["text"] = gr.Textbox(label=t("Text"), lines=4, value=EXAMPLES[1][0], elem_id="text",
                           info=t("Inline control tokens work: [uv_break] [laugh] [lbreak]"))
    gr.Examples(EXAMPLES, inputs=[c["text"]], label=t("Examples"))
    with gr.Row():
        c["generate"] = gr.Button(t("Generate"), variant="primary", elem_id="generate")
        c["interrupt"] = gr.Button(t("Interrupt"), variant="stop", elem_id="interrupt")
    with gr.Row():
        c["stream"] = gr.Checkbox(label=t("Stream (play while generating)"), value=False, elem_id="stream")
        c["split"] = gr.Checkbox(label=t("Split long text into sentences (batched)"), value=False, elem_id="split")


def _voice_panel(c: dict, voices_dir) -> None:
    with gr.Accordion(t("Voice"), open=True):
        c["voice_mode"] = gr.Radio([(t(mode), mode) for mode in VOICE_MODES], value=VOICE_MODES[0], label=t("Voice from"), elem_id="voice-mode")
        with gr.Row():
            c["preset"] = gr.Dropdown([(f"{name} (seed {seed})", name) for name, seed in PRESET_VOICES.items()],
                                      value=None, label=t("Preset voice"), elem_id="preset",
                                      info=t("a named seed: the same voice every time (noise on random weights)"))
            c["saved_voice"] = gr.Dropdown(saved_card_names(voices_dir), value=None, label=t("Saved voice"),
                                           elem_id="saved-voice", info=t("cards saved to the voice library"))
            c["voice_seed"] = gr.Number(value=2, precision=0, label=t("Voice seed"), elem_id="voice-seed", minimum=0)
            c["dice"] = gr.Button(t("Random voice"), elem_id="dice", scale=0, min_width=120)
        c["speaker"] = gr.Textbox(label=t("Speaker embedding (copy / paste)"), lines=2, max_lines=4, elem_id="speaker",
                                  buttons=["copy"], placeholder=t("paste a speaker string to reuse a voice"))
        c["show_speaker"] = gr.Button(t("Show the speaker string for this seed"), size="sm")
        with gr.Row():
            c["sample_audio"] = gr.Audio(label=t("Sample clip (voice from a recording)"), sources=["upload"],
                                         type="filepath", elem_id="sample-audio")
            c["sample_text"] = gr.Textbox(label=t("Transcript of the clip"), lines=3, elem_id="sample-text")


def _card_panel(c: dict) -> None:
    # Open from the start: Gradio 6 mounts a closed accordion's controls on first opening and then
    # resets them to their initial values, dropping whatever was typed in the meantime (a card name).
    with gr.Accordion(t("Voice card: export / import"), open=True, elem_id="card-accordion"):
        gr.Markdown(t("A small JSON with the speaker embedding, seeds and parameters: the voice reproduces "
                      "on another machine. Saved cards are also voices for the OpenAI-compatible endpoint."))
        with gr.Row():
            c["card_name"] = gr.Textbox(label=t("Voice name"), value="my-voice", elem_id="card-name")
            c["export_card"] = gr.Button(t("Export voice card"), elem_id="export-card")
            c["save_card"] = gr.Button(t("Save to voice library"), elem_id="save-card")
        with gr.Row():
            c["card_out"] = gr.File(label=t("Voice card (download)"), elem_id="card-out", height=120)
            c["card_in"] = gr.File(label=t("Import a voice card"), file_types=[".json"], elem_id="card-in", height=120)


def _sampling_panel(c: dict) -> None:
    with gr.Accordion(t("Sampling"), open=True):  # open from the start, for the same reason
        with gr.Row():
            c["temperature"] = gr.Slider(0.01, 1.0, value=DEFAULT_SAMPLING.temperature, step=0.01,
                                         label=t("Temperature"), elem_id="temperature")
            c["top_p"] = gr.Slider(0.1, 1.0, value=DEFAULT_SAMPLING.top_p, step=0.05, label="Top-P")
            c["top_k"] = gr.Slider(1, 50, value=DEFAULT_SAMPLING.top_k, step=1, label="Top-K")
        with gr.Row():
            c["audio_seed"] = gr.Textbox("", label=t("Sampling seed"), placeholder=t("blank: random"), max_lines=1,
                                         elem_id="audio-seed")
            c["text_seed"] = gr.Textbox("", label=t("Text seed (refine)"), placeholder=t("blank: random"), max_lines=1,
                                        elem_id="text-seed")
            c["speed"] = gr.Slider(0, 9, value=DEFAULT_REQUEST.speed, step=1, label=t("Speed"))
        with gr.Row():
            c["refine"] = gr.Checkbox(label=t("Refine text first"), value=DEFAULT_REFINE.enabled)
            c["oral"] = gr.Slider(0, 9, value=DEFAULT_REFINE.oral, step=1, label=t("Oral"))
            c["laugh"] = gr.Slider(0, 2, value=DEFAULT_REFINE.laugh, step=1, label=t("Laugh"))
            c["brk"] = gr.Slider(0, 7, value=DEFAULT_REFINE.break_, step=1, label=t("Break"))
        with gr.Row():
            c["max_new_token"] = gr.Slider(1, MAX_NEW_TOKEN, value=DEFAULT_REQUEST.max_new_token, step=1,
                                           label=t(f"Max audio tokens ({STEPS_PER_AUDIO_SECOND:.1f} per second)"),
                                           elem_id="max-new-token")
            c["min_new_token"] = gr.Slider(0, MAX_NEW_TOKEN, value=0, step=1, label=t("Min audio tokens"),
                                           elem_id="min-new-token")


def _runtime_panel(c: dict, serving: ServingChoice) -> None:
    start = serving.settings
    # Open: controls in a closed accordion are built on first opening and reset to these values then.
    with gr.Accordion(t("Runtime"), open=True):
        c["in_use"] = gr.Markdown(in_use_note(start, serving.reason), elem_id="in-use")
        with gr.Row():
            c["device"] = gr.Dropdown(devices(), value=start.device, label=t("Device"), elem_id="device")
            c["engine"] = gr.Dropdown(engines_for(start.device), value=start.engine, label=t("Engine"), elem_id="engine")
            c["precision"] = gr.Dropdown(precisions_for(start.device, start.engine), value=start.precision,
                                         label=t("Precision"), elem_id="precision")
            c["threads"] = gr.Slider(1, max_threads(), value=start.threads or max_threads(), step=1, label=t("Threads"),
                                     elem_id="threads")
        with gr.Row():
            c["apply_best"] = gr.Button(t("Apply the best configuration from the benchmark"), elem_id="apply-best-synth")
            best = fastest_offer(serving)
            c["use_fastest"] = gr.Button(fastest_label(best), visible=best not in (None, start), elem_id="use-fastest")
            c["fastest"] = gr.State(best)


def _results_panel(c: dict) -> None:
    c["banner"] = gr.HTML(elem_id="banner")
    c["stream_audio"] = gr.Audio(label=t("Stream"), streaming=True, autoplay=True, visible=False, elem_id="stream-audio")
    c["audio"] = gr.Audio(label=t("Audio"), type="filepath", autoplay=True, buttons=["download"], elem_id="audio",
                          interactive=False)
    # A streamed result, whole, to play again or download: a player of its own that never autoplays, since the
    # Stream player above has played it (Gradio 6 reads `autoplay` once, when a player mounts: an update to it is
    # ignored, so the autoplaying player above cannot be told to stay quiet for one result).
    c["streamed"] = gr.Audio(label=t("Audio (the whole stream: play it again or download it)"), type="filepath",
                             autoplay=False, buttons=["download"], elem_id="streamed-audio", interactive=False,
                             visible=False)
    c["metrics"] = gr.Markdown(elem_id="metrics")
    with gr.Accordion(t("Raw measurements (JSON)"), open=False):
        c["measurements"] = gr.JSON(label=t("Measurements"), elem_id="measurements")


PRIVATE = dict(api_visibility="private")


def _wire(ctx: AppContext, ui: SynthesisTab) -> None:
    """Every event of the tab. Inputs given as a set arrive as one dict keyed by component; outputs are
    returned as a dict keyed by component, so neither depends on a position."""
    synthesis_work = dict(concurrency_id=SYNTHESIS_QUEUE, concurrency_limit=synthesis_concurrency(ctx), **PRIVATE)
    for trigger in (ui.generate.click, ui.text.submit):  # the metrics are put back as they were after a mistake
        trigger(bind(generate, ctx, ui), _synthesis_inputs(ui) | {ui.metrics}, ui.results(),
                show_progress_on=[ui.audio, ui.streamed], **synthesis_work)
    # Queued (in a group of its own, so it never waits for the model): Gradio shows a handler's gr.Info toasts
    # only for queued events, and the toast is how a person learns whether anything was interrupted.
    ui.interrupt.click(interrupt, None, None, concurrency_limit=None, **PRIVATE)
    ui.stream.change(bind(stream_players, ui, live_playback()), ui.stream, ui.players(), queue=False, **PRIVATE)
    _wire_voices(ctx, ui)
    _wire_runtime(ui)


def _synthesis_inputs(ui: SynthesisTab) -> set:
    return ui.runtime_shown() | {ui.imported_code} | ui.form()


def _wire_voices(ctx: AppContext, ui: SynthesisTab) -> None:
    model_work = dict(concurrency_id=MODEL_QUEUE, **PRIVATE)
    ui.dice.click(bind(roll_dice, ui), None, {ui.voice_seed, ui.voice_mode, ui.preset}, queue=False, **PRIVATE)
    ui.preset.change(bind(pick_preset, ui), ui.preset, {ui.voice_seed, ui.voice_mode}, queue=False, **PRIVATE)
    ui.show_speaker.click(bind(show_speaker, ctx, ui), ui.runtime_shown() | {ui.voice_seed},
                          {ui.speaker, ui.voice_mode}, **model_work)
    # Queued, as every handler that may warn: Gradio shows toasts only for queued events.
    ui.sample_audio.upload(bind(sample_uploaded, ui), ui.sample_audio,
                           {ui.sample_audio, ui.voice_mode, ui.imported_code}, concurrency_limit=None, **PRIVATE)
    card_inputs = _synthesis_inputs(ui) | {ui.card_name}
    ui.export_card.click(bind(export_card, ctx, ui), card_inputs, {ui.card_out, ui.speaker}, **model_work)
    ui.save_card.click(bind(save_to_library, ctx, ui), card_inputs, ui.saved_voice, **model_work)
    card_fields = {ui.voice_mode, ui.voice_seed, ui.speaker, ui.sample_text, ui.imported_code, ui.temperature, ui.top_p,
                   ui.top_k, ui.audio_seed, ui.text_seed, ui.refine, ui.oral, ui.laugh, ui.brk, ui.speed, ui.card_name}
    ui.card_in.upload(bind(import_card, ui), ui.card_in, card_fields | {ui.card_in}, **PRIVATE)
    ui.saved_voice.input(bind(pick_saved, ctx, ui), ui.saved_voice, card_fields | {ui.saved_voice},
                         concurrency_limit=None, **PRIVATE)


def _wire_runtime(ui: SynthesisTab) -> None:
    # On a person's pick only (`.input`): Apply, "Use the fastest" and a refresh after a sweep set the controls, the
    # state and the note together, and a `.change` listener would then call their choice the person's own. A pick
    # too is one event that sets all three (handlers.change_device), so whichever lands last leaves them agreeing,
    # and of the picks and applies the one sent last is the one that lands (handlers.RUNTIME_PICKS);
    # and every event that runs the model takes the controls as well (`ui.runtime_shown()`) and runs on what they
    # show (`SynthesisTab.settings_shown`), the state only where it matches them.
    choice = {ui.device, ui.engine, ui.precision, ui.threads}
    settled = {ui.runtime, ui.chosen, ui.in_use}
    ui.device.input(bind(change_device, ui), choice, {ui.engine, ui.precision} | settled, queue=False, **PRIVATE)
    ui.engine.input(bind(change_engine, ui), choice, {ui.precision} | settled, queue=False, **PRIVATE)
    for control in (ui.precision, ui.threads):
        control.input(bind(update_settings, ui), choice, settled, queue=False, **PRIVATE)
    ui.use_fastest.click(bind(apply_settings, ui), ui.fastest, ui.runtime_controls(), **PRIVATE)


def _build_api(ctx: AppContext) -> None:
    """Hidden components behind the stable `/synthesize` API name, one per parameter of `api_synthesize` in its
    (documented) order, each starting from that parameter's default, so a script may pass only `text`."""
    with gr.Group(visible=False):
        inputs = [
            gr.Textbox(label="text"),
            gr.Textbox(label="voice", value=""),
            gr.Number(label="temperature", value=DEFAULT_SAMPLING.temperature),
            gr.Number(label="top_p", value=DEFAULT_SAMPLING.top_p),
            gr.Number(label="top_k", value=DEFAULT_SAMPLING.top_k, precision=0),
            gr.Number(label="audio_seed", value=None, precision=0),
            gr.Number(label="speed", value=DEFAULT_REQUEST.speed, precision=0),
            gr.Number(label="max_new_token", value=DEFAULT_REQUEST.max_new_token, precision=0),
            gr.Checkbox(label="split", value=False),
        ]
        out_audio = gr.Audio(type="filepath", label="audio")
        out_json = gr.JSON(label="measurements")
        trigger = gr.Button("synthesize")
    trigger.click(bind(api_synthesize, ctx), inputs, [out_audio, out_json], api_name="synthesize",
                  concurrency_id=SYNTHESIS_QUEUE, concurrency_limit=synthesis_concurrency(ctx))


def synthesis_concurrency(ctx: AppContext) -> int:
    """Requests let through to the batcher at once: enough to fill the next batches; Gradio queues the rest
    and shows each its place."""
    return 4 * ctx.policy.max_batch
