"""Scripts talk to the real app through gradio_client (the /v1 route: tests/serve/test_openai_api.py)."""

import json
import urllib.error
import urllib.request

import numpy as np
import pytest
import soundfile as sf

SYNTH_ARGS = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=16, split=False)


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def synthesize(client, text, voice="Aria", **overrides):
    args = {**SYNTH_ARGS, **overrides}
    return client.predict(text, voice, *args.values(), api_name="/synthesize")


def test_synthesize_returns_a_wav_file_and_measurements(client):
    path, m = synthesize(client, "Hello from a script.")
    wav, sr = sf.read(path)
    assert sr == 24_000 and len(wav) == (2 * m["tokens"][0] - 1) * 256
    assert m["synthetic"] is True and m["wall_s"] > 0
    assert set(m["stages"]) >= {"prefill_s", "decode_s", "decoder_s", "vocoder_s"}
    assert m["effective"]["device"] == "cpu"


def test_synthesize_needs_only_the_text(client):
    path, m = client.predict("Hi", api_name="/synthesize")
    wav, sr = sf.read(path)
    assert sr == 24_000 and len(wav) == (2 * m["tokens"][0] - 1) * 256


def test_synthesize_parameters_by_name_mean_the_same_as_in_the_documented_order(client):
    by_position, _ = synthesize(client, "Named or not.", voice="Bo", audio_seed=3)
    by_name, _ = client.predict("Named or not.", voice="Bo", audio_seed=3, max_new_token=SYNTH_ARGS["max_new_token"],
                                api_name="/synthesize")
    assert np.array_equal(sf.read(by_name)[0], sf.read(by_position)[0])


def test_a_voice_card_speaks_with_the_voice_it_holds(client):
    card = json.dumps({"format": "chattts-lab-voice", "version": 1, "name": "c", "seed": 7})
    by_card, _ = synthesize(client, "Which voice is this?", voice=card)
    by_seed, _ = synthesize(client, "Which voice is this?", voice="seed:7")
    other, _ = synthesize(client, "Which voice is this?", voice="seed:8")
    assert np.array_equal(sf.read(by_card)[0], sf.read(by_seed)[0])
    assert not np.array_equal(sf.read(by_card)[0], sf.read(other)[0])  # same text and sampling seed, other voice


def test_synthesize_splits_text_into_one_batch_of_sentences(client):
    text = "This first sentence is long enough that it will not share a batch item with the next. " * 2
    path, m = synthesize(client, text, split=True)
    assert len(m["tokens"]) == 2  # two sentences, one batch


@pytest.mark.parametrize("text, voice, message", [
    ("", "Aria", "text is empty"),
    ("   \n ", "Aria", "text is empty"),
    ("Hello", "x" * 200, "speaker string is malformed"),
    ("Hello", "{not a card", "not valid JSON"),
    ("Hello", "Nobody", "unknown voice"),
])
def test_bad_input_gets_a_clear_message_and_the_next_request_works(client, text, voice, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message):
        synthesize(client, text, voice=voice)
    path, _ = synthesize(client, "Still working.")
    assert sf.info(path).samplerate == 24_000


def test_monitoring_is_off_unless_asked_for(app_url):
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(app_url + "monitoring", timeout=30)


def test_run_sweep_returns_the_results_table_with_impossible_cells_kept(client):
    """`/run_sweep` as a script calls it: one real cell on tiny weights, plus one the rules refuse."""
    table = client.predict("cpu", "fp32,int4", "1", "1", "8", 1, False, api_name="/run_sweep")
    rows = [dict(zip(table["headers"], row)) for row in table["data"]]
    assert {r["precision"]: r["status"] for r in rows} == {"fp32": "ok", "int4": "unsupported"}
    ok = next(r for r in rows if r["status"] == "ok")
    assert float(ok["rtf"]) > 0 and int(ok["tokens"]) == 8
