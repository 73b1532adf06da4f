"""The Synthesis tab's voice helpers: random and preset voices, the speaker string, voice cards and the library."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import gradio as gr

from chattts_lab.voices import PRESET_VOICES, VoiceCard, load_card, parse_card, save_card, saved_card_names
from chattts_lab.said import Said
from chattts_lab.serve import speech
from webui.common import present
from webui.i18n.texts import localized
from chattts_lab.serve.uploads import InvalidUpload, check_audio_upload
from chattts_lab.serve.context import AppContext
from webui.synthesis.form import USER_ERRORS, VOICE_MODES, build_request, Form, _seed_text, SynthesisTab, _voice


def roll_dice(ui: SynthesisTab):
    return {ui.voice_seed: random.randint(1, 99_999), ui.voice_mode: VOICE_MODES[0], ui.preset: None}


def pick_preset(ui: SynthesisTab, name):
    if not name:
        return gr.skip()
    return {ui.voice_seed: PRESET_VOICES[name], ui.voice_mode: VOICE_MODES[0]}


def sample_uploaded(ui: SynthesisTab, path, request: gr.Request = None):
    """A clip is checked as it arrives (not at Generate): one that is not audio is refused and removed at once."""
    if not path:
        return gr.skip()
    try:
        check_audio_upload(path)
    except InvalidUpload as exc:
        present.warn(Said("Sample clip refused: {why}.", why=str(exc)), request)
        return {ui.sample_audio: None}
    return {ui.voice_mode: VOICE_MODES[2], ui.imported_code: None}


def show_speaker(ctx: AppContext, ui: SynthesisTab, values: dict, request: gr.Request = None):
    seed = values[ui.voice_seed]
    if seed is None:
        raise present.error("set a voice seed first", request)
    try:
        settings = ui.settings_shown(values)
    except ValueError as exc:  # what the controls show cannot run here: said, never replaced
        raise present.error(str(exc), request) from None
    return {ui.speaker: speech.speaker_for_seed(ctx, settings, int(seed)), ui.voice_mode: VOICE_MODES[1]}


def _card_from_form(ctx: AppContext, ui: SynthesisTab, values: dict) -> VoiceCard:
    """The voice card for the controls' values as this event sent them."""
    settings, imported_code, form = ui.settings_shown(values), values[ui.imported_code], Form.read(ui, values)
    voice = _voice(ctx, settings, form, imported_code)
    req = build_request(ctx, settings, replace(form, text="card", split=False), imported_code)
    card = VoiceCard(
        name=(values[ui.card_name] or "voice").strip()[:64] or "voice",
        speaker=voice.speaker,
        seed=voice.seed,
        sample_audio_code=voice.sample_audio_code,
        sample_text=voice.sample_text,
        sampling=req.sampling,
        refine=req.refine,
        speed=req.speed,
    )
    return speech.card_with_embedding(ctx, settings, card)


def export_card(ctx: AppContext, ui: SynthesisTab, values: dict):
    """Export button: the voice as a small JSON file that reproduces it on another machine."""
    try:
        card = _card_from_form(ctx, ui, values)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    folder = ctx.files_dir / f"card-{random.randint(0, 16**8):08x}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(card.name).name or 'voice'}.voice.json"
    path.write_text(card.to_json(), encoding="utf-8")
    return {ui.card_out: str(path), ui.speaker: card.speaker or gr.skip()}


def save_to_library(ctx: AppContext, ui: SynthesisTab, values: dict, request: gr.Request = None):
    """Save: the voice under its name in the library (a voice name for scripts, and a pick in "Saved voice")."""
    try:
        card = _card_from_form(ctx, ui, values)
    except USER_ERRORS as exc:
        raise gr.Error(str(exc)) from exc
    replaced = load_card(card.name, ctx.voices_dir) is not None
    save_card(card, ctx.voices_dir)
    replacing = Said(", replacing the one saved under that name before") if replaced else ""
    present.info(Said("Saved voice '{name}'{replacing}: pick it in Saved voice; the OpenAI-compatible endpoint "
                           "accepts voice='{name}'.", name=card.name, replacing=replacing), request)
    return {ui.saved_voice: gr.update(choices=saved_card_names(ctx.voices_dir))}


def saved_voices(ctx: AppContext, ui: SynthesisTab):
    """The library's names, read afresh when a page opens (another page or a script may have saved one)."""
    return {ui.saved_voice: gr.update(choices=saved_card_names(ctx.voices_dir))}


def pick_saved(ctx: AppContext, ui: SynthesisTab, name, request: gr.Request = None):
    """Saved voice: fill the voice and sampling controls from the library's card."""
    if not name:
        return gr.skip()
    try:
        card = load_card(name, ctx.voices_dir)
    except USER_ERRORS as exc:
        present.warn(Said("Could not read the saved voice '{name}': {why}", name=name, why=str(exc)),
                               request)
        return gr.skip()
    if card is None:
        present.warn(Said("No saved voice '{name}' any more (deleted from {folder}?).", name=name,
                                    folder=ctx.voices_dir.name), request)
        return saved_voices(ctx, ui)
    return _controls_from_card(ui, card)


def import_card(ui: SynthesisTab, file, request: gr.Request = None):
    """Import: fill the voice and sampling controls from a card (parsed strictly as data)."""
    if not file:
        return gr.skip()
    try:
        card = parse_card(Path(file).read_bytes()[: 2 * 1024 * 1024])
    except USER_ERRORS as exc:
        # A warning, not an error: an error would cover every voice control with an error overlay.
        present.warn(Said("Could not import that voice card: {why}", why=localized(str(exc), request)),
                               request)
        return {ui.card_in: None}
    present.info(Said("Imported voice '{name}'.", name=card.name), request)
    return {**_controls_from_card(ui, card), ui.card_in: None}


def _controls_from_card(ui: SynthesisTab, card: VoiceCard) -> dict:
    mode = VOICE_MODES[1] if card.speaker else VOICE_MODES[2] if card.sample_audio_code else VOICE_MODES[0]
    s, r = card.sampling, card.refine
    return {
        ui.voice_mode: mode, ui.voice_seed: card.seed, ui.speaker: card.speaker or "",
        ui.sample_text: card.sample_text or "", ui.imported_code: card.sample_audio_code,
        ui.temperature: s.temperature, ui.top_p: s.top_p, ui.top_k: s.top_k,
        ui.audio_seed: _seed_text(s.audio_seed), ui.text_seed: _seed_text(s.text_seed),
        ui.refine: r.enabled, ui.oral: r.oral, ui.laugh: r.laugh, ui.brk: r.break_,
        ui.speed: card.speed, ui.card_name: card.name,
    }
