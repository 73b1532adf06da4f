"""A person in chromium: synthesize and play, stream, interrupt, voice cards, bad input."""

from __future__ import annotations

import io
import json
import re
import time

import numpy as np
import pytest
import soundfile as sf
from playwright.sync_api import expect

from tests.conftest import SCREENSHOTS, TINY
from tests.support.ui import (LONG, audio_href, close_toasts, generate, open_accordion, pick_option, set_number, set_text,
                              wait_new_audio, wait_result, wait_toast)

pytestmark = pytest.mark.browser


# The players live in a shadow root: Playwright's locators pierce it, document.querySelector does not.
PLAYED = "els => els.some(a => a.src && (!a.paused || a.currentTime > 0 || a.ended))"


def wait_played(page, elem_id: str = "audio", timeout_s: float = LONG / 1000) -> None:
    deadline = time.monotonic() + timeout_s
    while not page.locator(f"#{elem_id} audio").evaluate_all(PLAYED):
        assert time.monotonic() < deadline, "the audio player never started"
        page.wait_for_timeout(200)


def samples(page, href: str) -> np.ndarray:
    wav, sr = sf.read(io.BytesIO(page.request.get(href).body()))
    assert sr == 24_000 and len(wav) > 0
    return wav


def test_synthesize_and_play_with_the_synthetic_banner(page):
    generate(page, "四川美食确实以辣闻名，但也有不辣的选择。Hello [uv_break] world!", tokens=32)
    metrics = wait_result(page)
    for label in ("Latency", "RTF", "×real-time", "GPT steps/s", "peak RSS", "GPT decode", "vocoder (Vocos)"):
        assert label in metrics
    assert "timings are real, the audio is noise" in page.locator("#banner").inner_text()
    href = audio_href(page)
    assert href and href.endswith(".wav")
    wav, sr = sf.read(io.BytesIO(page.request.get(href).body()))
    assert sr == 24_000 and len(wav) > 0
    # Autoplay: the player starts on its own.
    wait_played(page)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "synthesis.png"), full_page=True)


# Whether each loaded player plays, and how far (a player with no source yet is left out).
PLAYING = "els => els.filter(a => a.src).map(a => ({paused: a.paused, at: a.currentTime}))"


def test_stream_shows_time_to_first_audio_and_the_whole_result_does_not_play_over_it(page):
    page.check("#stream input[type=checkbox]")
    page.locator("#stream-audio").wait_for(state="visible")
    generate(page, "Streaming plays while the model is still generating.", tokens=240, min_tokens=240)
    metrics = wait_result(page)
    assert re.search(r"time to first audio \d+\.\d+ s", metrics)
    # The whole result is offered (to play again or download) in the player on view that holds a wav...
    final = page.locator("#audio, #streamed-audio").filter(visible=True).filter(has=page.locator("a[href*='.wav']"))
    expect(final).to_have_count(1, timeout=LONG)
    # ...once it has decoded the file (its duration shown): a player that autoplays has called play() by then.
    expect(final.locator("time#duration")).not_to_have_text("0:00", timeout=LONG)
    assert page.locator("#stream-audio audio").evaluate_all(PLAYING), "the Stream player never got the stream"
    states = final.locator("audio").evaluate_all(PLAYING)
    assert states and all(s["paused"] and s["at"] == 0 for s in states), states  # it stays quiet over the stream


def test_interrupt_keeps_the_audio_made_so_far(page):
    # Streaming shows when the first audio exists, so the click surely lands while the model is generating.
    page.check("#stream input[type=checkbox]")
    generate(page, "A long one that I will stop half way through, because I changed my mind.", tokens=2048,
             min_tokens=2048)
    page.locator("#metrics").filter(has_text="time to first audio").wait_for(timeout=LONG)
    page.click("#interrupt")
    wait_toast(page, "Interrupting after the current step")
    metrics = wait_result(page)
    assert "interrupted" in metrics
    tokens = int(re.search(r"from (\d+) tokens", metrics).group(1))
    assert 0 < tokens < 2048
    # the audio of the tokens made so far, in the player of a streamed result
    assert len(samples(page, audio_href(page, "streamed-audio"))) == (2 * tokens - 1) * 256


def test_voice_card_exports_and_reimports_the_same_voice(page, tmp_path):
    text = "Same voice on another machine."
    pick_option(page, "preset", "Cleo")
    page.wait_for_function("() => document.querySelector('#voice-seed input').value === '2222'")
    set_number(page, "temperature", 0.42)
    set_text(page, "audio-seed", 7)
    generate(page, text, tokens=16, min_tokens=16)
    original = samples(page, wait_new_audio(page))

    # A person types a name and clicks Export straight away: the card carries that name.
    page.fill("#card-name textarea, #card-name input", "test-voice")
    page.click("#export-card")
    link = page.locator("#card-out a[href*='.json']")
    link.first.wait_for(timeout=LONG)
    card = json.loads(page.request.get(link.first.get_attribute("href")).body())
    assert card["name"] == "test-voice" and card["seed"] == 2222
    assert card["sampling"]["temperature"] == pytest.approx(0.42) and card["sampling"]["audio_seed"] == 7
    assert len(card["speaker"]) > 100  # the embedding travels with the card
    card_file = tmp_path / "test-voice.voice.json"
    card_file.write_text(json.dumps(card))

    page.reload()  # a fresh session: nothing of the old voice is left
    page.wait_for_selector("#generate", timeout=LONG)
    page.locator("#card-in input[type=file]").set_input_files(str(card_file))
    wait_toast(page, "Imported voice 'test-voice'")
    # the toast is shown while the event runs, the fields when it returns: wait for them (a loaded run saw '')
    expect(page.locator("#speaker textarea")).to_have_value(card["speaker"], timeout=LONG)
    expect(page.locator("#voice-mode input[value='Speaker string']")).to_be_checked(timeout=LONG)
    generate(page, text, tokens=16, min_tokens=16)
    reimported = wait_new_audio(page)
    assert np.array_equal(samples(page, reimported), original)  # the card reproduces the voice, sample for sample

    # The comparison can tell voices apart: another voice, same text and seeds, other audio.
    pick_option(page, "preset", "Aria")
    page.wait_for_function("() => document.querySelector('#voice-seed input').value === '2'")
    expect(page.locator("#voice-mode input[value='Seed / preset']")).to_be_checked()
    page.click("#generate")
    other = samples(page, wait_new_audio(page, previous=reimported))
    assert len(other) != len(original) or not np.allclose(other, original)


def test_a_blank_sampling_seed_draws_anew_and_a_typed_one_repeats(page):
    """"Blank: random" must hold in the browser: a number box would send 0 for blank, the same seed every time."""
    generate(page, "Same voice, new draw?", tokens=16, min_tokens=16)
    first = wait_new_audio(page)
    page.click("#generate")
    second = wait_new_audio(page, previous=first)
    assert not np.array_equal(samples(page, first), samples(page, second))

    set_text(page, "audio-seed", 3)
    page.click("#generate")
    third = wait_new_audio(page, previous=second)
    page.click("#generate")
    fourth = wait_new_audio(page, previous=third)
    assert np.array_equal(samples(page, third), samples(page, fourth))


def test_a_seed_voice_and_its_speaker_string_sound_the_same_and_a_random_voice_does_not(page):
    text = "Which voice is speaking now?"
    set_text(page, "audio-seed", 11)
    generate(page, text, tokens=16, min_tokens=16)
    first = wait_new_audio(page)
    by_seed = samples(page, first)

    page.click("text=Show the speaker string for this seed")
    expect(page.locator("#voice-mode input[value='Speaker string']")).to_be_checked()
    assert len(page.locator("#speaker textarea").input_value()) > 100
    page.click("#generate")
    second = wait_new_audio(page, previous=first)
    assert np.array_equal(samples(page, second), by_seed)

    seed_before = page.locator("#voice-seed input").input_value()
    page.click("#dice")
    expect(page.locator("#voice-mode input[value='Seed / preset']")).to_be_checked()
    assert page.locator("#voice-seed input").input_value() != seed_before
    page.click("#generate")
    other = samples(page, wait_new_audio(page, previous=second))
    assert len(other) != len(by_seed) or not np.allclose(other, by_seed)


def test_a_voice_saved_to_the_library_is_a_voice_name_for_scripts(page, app_url):
    from gradio_client import Client

    pick_option(page, "preset", "Cleo")
    page.wait_for_function("() => document.querySelector('#voice-seed input').value === '2222'")
    page.fill("#card-name textarea, #card-name input", "library-cleo")
    page.click("#save-card")
    wait_toast(page, "Saved voice 'library-cleo'")
    client = Client(app_url, verbose=False)
    spoken = {voice: sf.read(client.predict("Saved voices speak too.", voice, audio_seed=5, max_new_token=16,
                                            api_name="/synthesize")[0])[0]
              for voice in ("library-cleo", "Cleo", "Aria")}
    assert np.array_equal(spoken["library-cleo"], spoken["Cleo"])
    assert not np.array_equal(spoken["library-cleo"], spoken["Aria"])  # the name chose the voice


def test_bad_input_gets_a_clear_message_then_the_next_request_works(page, tmp_path):
    page.fill("#text textarea", "   ")
    page.click("#generate")
    wait_toast(page, "text is empty")
    close_toasts(page)

    page.fill("#text textarea", "Hello with a broken voice.")
    page.check("#voice-mode input[value='Speaker string']")
    page.fill("#speaker textarea", "this is not a speaker embedding")
    page.click("#generate")
    wait_toast(page, "speaker string is malformed")
    close_toasts(page)

    bad = tmp_path / "corrupt.json"
    bad.write_bytes(b'{"format": "chattts-lab-voice", "version": 1, "seed": "x"')
    open_accordion(page, "Voice card: export / import")
    page.locator("#card-in input[type=file]").set_input_files(str(bad))
    wait_toast(page, "Could not import that voice card: voice card is not valid JSON")
    close_toasts(page)

    page.check("#voice-mode input[value='Seed / preset']")
    generate(page, "And now it works.", tokens=16)
    wait_result(page)


def test_the_page_says_which_configuration_serves_and_why_and_the_fastest_is_one_click_away(page, app_dir):
    """What the page says is what chattts_lab.serve.runtime.serving_choice decides from this app's history, which other tests
    of this session may have filled (an empty one offers lab int4, faster than the default lab int8)."""
    from chattts_lab.serve.runtime import describe, serving_choice

    choice = serving_choice(app_dir / "history.sqlite", TINY)
    in_use = page.locator("#in-use")
    expect(in_use).to_contain_text(f"In use: {describe(choice.settings)} ({choice.reason[:40]}", timeout=LONG)
    if choice.fastest is None:  # the configuration in use is the fastest measured here
        expect(page.locator("#use-fastest")).to_be_hidden()
        return
    page.click("#use-fastest")
    expect(in_use).to_contain_text(f"In use: {describe(choice.fastest)} (chosen on this page)", timeout=LONG)
    generate(page, "The fastest configuration, one click away.", tokens=8)
    ran = wait_result(page)
    assert choice.fastest.precision in ran and f"{choice.fastest.engine} engine" in ran, ran
