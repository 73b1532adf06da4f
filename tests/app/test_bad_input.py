"""Bad input, against the real app and the real `bench` command: a specific message, the server alive,
nothing lost, and the next valid request works. Also bundles crafted to inject paths or markup."""

from __future__ import annotations

import json
import pickle

import pytest
import soundfile as sf

SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=8, split=False)


@pytest.fixture(scope="module")
def client(app_url):
    from gradio_client import Client

    return Client(app_url, verbose=False)


def synthesize(client, text, voice="Aria", **overrides):
    return client.predict(text, voice, *{**SYNTH, **overrides}.values(), api_name="/synthesize")


def card(**fields):
    return json.dumps({"format": "chattts-lab-voice", "version": 1, "name": "c", "seed": 7, **fields})


BAD = [
    ("x" * 100_000, "Aria", "100,000 characters; at most 5,000"),
    ("?!... ,,, ;;; ---", "Aria", "nothing to speak"),
    ("😀🎉🔥 👍", "Aria", "nothing to speak"),
    ("[laugh] [uv_break] [foo]", "Aria", "nothing to speak"),
    ("\x00\x01\x02\x1b\x7f\x0b", "Aria", "text is empty"),  # control characters only
    ("Hello", "{not json at all", "not valid JSON"),
    ("Hello", card(colour="red"), "unknown voice card fields: colour"),
    ("Hello", card(seed="seven"), "field 'seed' must be an integer"),
    ("Hello", card(sampling={"temperature": 99}), "temperature must be in"),
    ("Hello", card(name="n" * 100_000), "longer than 64"),
    ("Hello", card(sample_text="x" * 300_000), "over 262,144 bytes"),
    ("Hello", json.dumps([1, 2, 3]), "unknown voice"),
    ("Hello", pickle.dumps({"a": 1}).hex() * 3, "speaker string"),
    ("Hello", "seed:abc", "after 'seed:' comes a whole number"),
    ("Hello", "\u0000" * 70, "speaker string"),
]


@pytest.mark.parametrize("text, voice, message", BAD, ids=[m.split(";")[0][:30] for _, _, m in BAD])
def test_bad_text_and_voices_get_a_specific_message(client, text, voice, message):
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=message.replace("(", r"\(").replace("[", r"\[")):
        synthesize(client, text, voice=voice)


@pytest.mark.parametrize("text", [
    "Hello\x07 there,\x00 friend.",  # control characters are dropped, the words are spoken
    "Hi 😀, this has emoji too.",
    "我最近在学 English，每天 practice 半个小时。Привет! مرحبا",  # mixed scripts
    "Unknown tags [foo] and [bar_9] around [uv_break] words.",
])
def test_odd_but_speakable_text_is_spoken(client, text):
    path, m = synthesize(client, text)
    assert sf.info(path).samplerate == 24_000 and m["tokens"][0] > 0


def test_the_server_still_serves_after_every_bad_request(client):
    path, m = synthesize(client, "Still working after all that.")
    assert sf.info(path).frames > 0 and m["synthetic"] is True


# ----------------------------------------------------------------------------------------------
# The bench command line: non-zero exit and the message, nothing run


@pytest.mark.parametrize("args, message", [
    (["--batch=-1"], "batch size must be in 1..64, got -1"),
    (["--batch", "100000"], "batch size must be in 1..64, got 100000"),
    (["--batch", "1.5"], "'1.5' is not a whole number"),
    (["--threads", "0"], "threads must be in 1..4096, got 0"),
    (["--threads", "99999"], "threads must be in 1..4096, got 99999"),
    (["--tokens", "0"], "tokens must be in 2..2048, got 0"),
    (["--tokens", "1e9"], "'1e9' is not a whole number"),
    (["--repeats", "0"], "repeats must be in 1..10000, got 0"),
    (["--repeats=-3"], "repeats must be in 1..10000, got -3"),
    (["--repeats", "20000"], "repeats must be in 1..10000, got 20000"),
    (["--repeats", "many"], "invalid int value: 'many'"),
    (["--precision", "fp8"], "unknown precision 'fp8'"),
    (["--device", "tpu"], "unknown device 'tpu'"),
    (["--device", "cuda:x"], "unknown device 'cuda:x'"),
    (["--timeout", "0"], "timeout_s must be positive"),
    (["--memory-budget-mb", "-5"], "memory budget must be in 1.."),
    (["--memory-budget-mb", "nan"], "memory budget must be a number"),
    (["--memory-budget-mb", "lots"], "invalid float value: 'lots'"),
])
def test_bad_sweep_specs_exit_non_zero_with_the_reason(tmp_path, capsys, args, message):
    from bench.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--model", "synthetic-tiny", "--db", str(tmp_path / "lab.sqlite"), *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "lab.sqlite").exists()  # nothing started


def test_a_grid_too_large_to_finish_is_refused_with_an_estimate(tmp_path, capsys):
    from bench.cli import main

    code = main(["--model", "synthetic", "--tokens", "2048", "--repeats", "10000", "--db", str(tmp_path / "lab.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "refusing a grid of 1 cells / about" in err and " h " in err and "--yes" in err
    assert not (tmp_path / "lab.sqlite").exists()


# ----------------------------------------------------------------------------------------------
# Bundles crafted to inject paths or markup are data: stored as text, escaped in every report

EVIL = "<script>alert('x')</script></script><img src=x onerror=alert(1)>"


def _crafted_bundle(path):
    from chattts_lab.history.bundle import BUNDLE_FORMAT, BUNDLE_VERSION
    from chattts_lab.sweep.results import CellResult, RunConfig

    cells = [CellResult(RunConfig("../../../../etc/passwd", "cpu", p, 1, 1, 8), "error", reason=EVIL).to_dict()
             for p in ("fp32", EVIL)]
    body = {"format": BUNDLE_FORMAT, "version": BUNDLE_VERSION, "sweeps": [{
        "uuid": "../../../../tmp/evil-uuid", "created_at": EVIL, "status": "finished",
        "spec": {"model": "../../x", "__class__": "os.system"},
        "environment": {"hostname": EVIL, "cpu": {"model": EVIL}},
        "cells": cells, "fidelity": [{"device": "cpu", "engine": "stock", "precision": EVIL, "note": EVIL}]}]}
    path.write_text(json.dumps(body))
    return path


def test_a_crafted_bundle_is_imported_as_data_and_escaped_in_reports(tmp_path, capsys):
    from bench.cli import main

    db, out = tmp_path / "lab.sqlite", tmp_path / "out"
    before = set(tmp_path.parent.iterdir())
    assert main(["--import", str(_crafted_bundle(tmp_path / "evil.json")), "--db", str(db)]) == 0
    assert main(["--report", "1", "--db", str(db), "--out", str(out), "--format", "md,csv,json,html"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "results.html", "results.json", "results.md"]
    assert set(tmp_path.parent.iterdir()) == before  # nothing written outside tmp_path (uuid/model are not paths)
    page = (out / "results.html").read_text()
    assert "<script>alert" not in page and "<img src=x" not in page and "onerror=alert(1)>" not in page
    assert "&lt;script&gt;" in page  # shown, as text
    data = json.loads((out / "results.json").read_text())
    assert any(c["precision"] == EVIL for c in data["cells"])  # kept verbatim as data


@pytest.mark.parametrize("content, message", [
    (b"", "not a JSON bundle"),
    (b"\x80\x04\x95pickle", "not a JSON bundle"),
    (pickle.dumps({"format": "chattts-lab-bundle"}), "not a JSON bundle"),
    (b'{"format": "chattts-lab-bundle", "version": 1, "sweeps": [', "not a JSON bundle"),
    (json.dumps({"format": "chattts-lab-bundle", "version": 99, "sweeps": []}).encode(), "version 99"),
    (json.dumps({"format": "chattts-lab-bundle", "version": 1, "sweeps": "all"}).encode(), "must be a list"),
])
def test_corrupt_or_foreign_bundles_exit_non_zero_with_a_message(tmp_path, capsys, content, message):
    from bench.cli import main

    path = tmp_path / "bundle.json"
    path.write_bytes(content)
    assert main(["--import", str(path), "--db", str(tmp_path / "lab.sqlite")]) == 1
    assert message in capsys.readouterr().err


def test_a_bundle_with_a_malformed_environment_is_refused_and_imports_are_never_resumed(tmp_path, capsys):
    from bench.cli import main
    from chattts_lab.sweep.runner import resumable_sweep

    db = tmp_path / "lab.sqlite"
    bad = {"format": "chattts-lab-bundle", "version": 1, "sweeps": [{
        "uuid": "u1", "status": "running", "spec": {"model": 5}, "cells": [], "fidelity": [],
        "environment": {"cpu": "not an object", "gpus": [{"no": "name"}]}}]}
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    assert main(["--import", str(tmp_path / "bad.json"), "--db", str(db)]) == 1
    assert "'environment' is malformed" in capsys.readouterr().err
    good = {**bad, "sweeps": [{**bad["sweeps"][0], "environment": {"hostname": "elsewhere"}}]}
    (tmp_path / "good.json").write_text(json.dumps(good))
    assert main(["--import", str(tmp_path / "good.json"), "--db", str(db)]) == 0  # a `running` sweep arrives interrupted
    assert resumable_sweep(db) is None  # ...but another machine's sweep is never the one --resume picks
    with pytest.raises(SystemExit) as exit_info:
        main(["--resume", "1", "--db", str(db)])
    assert exit_info.value.code == 2 and "imported from another machine" in capsys.readouterr().err
