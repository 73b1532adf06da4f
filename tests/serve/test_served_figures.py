"""What the served routes report is what happened: the queue header counts every wait (a sweep holding the
model included), and refusals name the field they are about."""

from __future__ import annotations

import threading
import time

from chattts_lab import SynthesisRequest
from chattts_lab.serve import speech
from chattts_lab.serve.context import AppContext
from chattts_lab.serve.policy import ServingPolicy
from chattts_lab.serve.runtime import RuntimeSettings

from tests.support.event_loop import in_own_thread, run_in_fresh_loop

HOLD_S = 3.0


def test_a_wait_behind_a_sweep_holding_the_model_counts_as_queueing(tmp_path):
    ctx = AppContext(ServingPolicy(model="synthetic-tiny"), outputs_dir=tmp_path)
    held, released = threading.Event(), threading.Event()

    def sweep():  # what a running sweep does: hold the model lock while the request's batch waits for it
        with ctx.model_work:
            held.set()
            while not speech.batcher(ctx).running:
                time.sleep(0.01)
            time.sleep(HOLD_S)  # the request's batch is waiting for the model all this time
        released.set()

    holder = threading.Thread(target=sweep)
    holder.start()
    held.wait()  # the model is taken before the request arrives, as by a sweep already running
    request = SynthesisRequest.of("Hello.", max_new_token=4, min_new_token=4)
    out, _ = run_in_fresh_loop(speech.serve(ctx, RuntimeSettings(threads=1), request))
    holder.join()
    assert released.is_set()
    # at least the hold (less the moment a thread takes to start): not the batcher's own 25 ms wait for company
    assert out.measurements.queue_wait_s >= HOLD_S / 2, out.measurements.queue_wait_s


def test_a_serving_run_against_a_url_records_the_apps_own_model_and_batch_limit(app_url, tmp_path, capsys):
    from bench.cli import main
    from chattts_lab.history.store import Store

    db = tmp_path / "lab.sqlite"
    argv = ["serve", "--url", app_url, "--users", "1", "--requests", "1", "--tokens", "4", "--db", str(db)]
    assert in_own_thread(main, argv) == 0  # as from a shell: the serving client runs its own event loop
    err = capsys.readouterr().err
    assert "level 1: 1 user, max batch 8…" in err  # the app's default batch limit, not 0; one user, not "1 users"
    with Store(db) as store:
        sweep = store.sweeps_list()[0]
        levels = store.notes(sweep["id"])["serving"]["levels"]
    assert sweep["spec"]["model"] == "synthetic-tiny"  # what the app runs, not --model's default (synthetic)
    assert sweep["spec"]["served"]["max_batch"] == 8 and levels[0]["max_batch"] == 8
    # the app schedules continuously (lab engine): its bound is rows and a queue, not a batch's wait
    assert sweep["spec"]["served"]["scheduling"] == "continuous" and "max_wait_ms" not in sweep["spec"]["served"]


def test_run_sweep_returns_the_drift_and_says_which_settings_took_no_effect(tmp_path):
    from webui.benchmark.tab import api_run_sweep

    ctx = AppContext(ServingPolicy(model="synthetic-tiny"), outputs_dir=tmp_path, history_db=tmp_path / "history.sqlite")
    table = api_run_sweep(ctx, "cpu", "fp32", "1,2", "1", "4", 2, False)  # the README's repeats=2, passes 3
    assert list(table["status"]) == ["ok", "ok"]
    assert set(table["sweep_id"]) == {1} and table["drift_pct"].notna().all()
    assert table["noisy"].isin([True, False]).all()
    note = table["sweep_note"].iloc[0]
    assert note.startswith("Drift across passes") and "repeats 2 not used" in note


def test_v1_refusals_name_the_field_they_are_about_and_a_long_whole_file_suggests_streaming(tmp_path):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from chattts_lab.serve.openai_api import speech_router

    app = FastAPI()
    app.include_router(speech_router(AppContext(ServingPolicy(model="synthetic-tiny"), outputs_dir=tmp_path)))
    client = TestClient(app)

    def refusal(**body) -> dict:
        response = client.post("/v1/audio/speech", json={"voice": "Aria", **body})
        assert response.status_code == 400, response.text
        return response.json()["error"]

    assert refusal(input="")["param"] == "input"
    assert refusal(input="Hi.", min_new_token=20, max_new_token=10)["param"] == "min_new_token"
    sixty = "Word word word word word word word word word word word ends."  # 60 characters: no two merge
    many = refusal(input=" ".join([sixty] * 66), stream=False, max_new_token=2)  # within the 4,096 characters
    assert many["param"] == "input" and "input splits into 66 sentences" in many["message"]
    assert '"stream": true' in many["message"]
    assert client.get("/v1/audio/voices").json()["server"]["model"] == "synthetic-tiny"


def test_the_server_listing_names_the_scheduling_in_use_and_its_own_bounds(tmp_path):
    """GET /v1/audio/voices' "server": continuous batching's rows and queue, or a request-level batch and its wait."""
    from chattts_lab.serve.openai_api import AppSpeech
    from chattts_lab.serve.runtime import ServingChoice

    lab = ServingChoice(RuntimeSettings(threads=1, engine="lab"), "the default")

    def served(**how) -> dict:
        return AppSpeech(AppContext(ServingPolicy(model="synthetic-tiny", **how), outputs_dir=tmp_path, serving=lab)).served()

    rows = served(max_rows=3, max_queue=5, max_batch=6)
    assert {k: rows[k] for k in ("scheduling", "max_batch", "max_queue")} == {
        "scheduling": "continuous", "max_batch": 3, "max_queue": 5}
    assert "max_wait_ms" not in rows and rows["config"] == "lab · fp32 · cpu · 1 thread"
    assert rows["why"] == "the default"  # the app's reason for the configuration it serves
    batches = served(batching="request", max_batch=6, max_wait_ms=40)
    assert {k: batches[k] for k in ("scheduling", "max_batch", "max_wait_ms")} == {
        "scheduling": "request", "max_batch": 6, "max_wait_ms": 40}
