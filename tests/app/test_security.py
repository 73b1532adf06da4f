"""The app shared on a LAN: a login guards the UI, the Gradio API, the files and the /v1 route; no file
outside the app's own outputs can be read; uploads are limited; monitoring is off; running out of
memory is a message, not a dead server. Every test talks HTTP to a real `python app.py` process.
"""

from __future__ import annotations

import http.client as httpclient
import json
import urllib.parse
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, start_app, stop_app
from tests.support.reliability_helpers import server_pid

USER, PASSWORD = "alice", "correct horse"
SYNTH = dict(temperature=0.3, top_p=0.7, top_k=20, audio_seed=1, speed=5, max_new_token=8, split=False)


def http(url: str, path: str, method: str = "GET", body: bytes | None = None, headers: dict | None = None):
    """A raw request: the path goes on the wire exactly as written (no client-side ../ normalisation)."""
    parts = urllib.parse.urlsplit(url)
    conn = httpclient.HTTPConnection(parts.hostname, parts.port, timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def auth_app(tmp_path_factory):
    """A second real app with its own outputs folder and a secret beside it, given its login as the README
    advises: `CHATTTS_LAB_AUTH=user:pass python app.py` (no --auth, so the password stays out of `ps`)."""
    folder = tmp_path_factory.mktemp("auth-app")
    (folder / "secret.txt").write_text("TOP-SECRET-CONTENT")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("CHATTTS_LAB_AUTH", f"{USER}:{PASSWORD}")
        url, proc = start_app(folder)
    yield url, folder, proc
    stop_app(proc)


@pytest.fixture(scope="module")
def logged_in(auth_app):
    from gradio_client import Client

    return Client(auth_app[0], auth=(USER, PASSWORD), verbose=False)


def test_without_login_the_ui_api_files_and_v1_route_are_refused(auth_app, logged_in):
    url, folder, _ = auth_app
    path, m = logged_in.predict("Logged in.", "Aria", *SYNTH.values(), api_name="/synthesize")  # works with the login
    assert Path(path).stat().st_size > 44 and m["synthetic"] is True
    (made,) = list((folder / "outputs" / "audio").glob("*.wav"))  # the file the server wrote
    refused = {
        "config": http(url, "/config"),
        "api info": http(url, "/gradio_api/info"),
        "api call": http(url, "/gradio_api/call/synthesize", "POST", json.dumps({"data": ["x"]}).encode(),
                         {"Content-Type": "application/json"}),
        "queue": http(url, "/gradio_api/queue/join", "POST", b"{}", {"Content-Type": "application/json"}),
        "upload": http(url, "/gradio_api/upload", "POST", b"", {"Content-Type": "multipart/form-data; boundary=x"}),
        "own output file": http(url, f"/gradio_api/file={made}"),
        "v1 voices": http(url, "/v1/audio/voices"),
        "v1 speech": http(url, "/v1/audio/speech", "POST", json.dumps({"input": "hi"}).encode(),
                          {"Content-Type": "application/json"}),
        "v1 wrong key": http(url, "/v1/audio/voices", headers={"Authorization": "Bearer alice:wrong"}),
    }
    for name, (status, _, body) in refused.items():
        assert status in (401, 403), f"{name}: {status} {body[:200]!r}"
        assert b"RIFF" not in body[:4]
    from gradio_client import Client
    from gradio_client.exceptions import AuthenticationError

    with pytest.raises(AuthenticationError, match="credentials were not provided"):
        Client(url, verbose=False)  # a script without the login gets nothing either
    status, _, body = http(url, "/login", "POST", urllib.parse.urlencode({"username": USER, "password": "nope"}).encode(),
                           {"Content-Type": "application/x-www-form-urlencoded"})
    assert status in (400, 401), body[:200]
    status, _, body = http(url, "/v1/audio/voices", headers={"Authorization": f"Bearer {USER}:{PASSWORD}"})
    assert status == 200 and "Aria" in json.loads(body)["voices"]


def _cookie(url: str) -> str:
    status, headers, body = http(url, "/login", "POST",
                                 urllib.parse.urlencode({"username": USER, "password": PASSWORD}).encode(),
                                 {"Content-Type": "application/x-www-form-urlencoded"})
    assert status == 200, body[:200]
    return "; ".join(c.split(";")[0] for k, c in headers.items() if k.lower() == "set-cookie")


def test_no_file_outside_the_outputs_can_be_downloaded(auth_app, logged_in):
    url, folder, _ = auth_app
    logged_in.predict("A file of our own.", "Bo", *SYNTH.values(), api_name="/synthesize")
    cookie = {"Cookie": _cookie(url)}
    own = sorted((folder / "outputs" / "audio").glob("*.wav"))[-1]
    status, _, body = http(url, f"/gradio_api/file={own}", headers=cookie)
    assert status == 200 and body[:4] == b"RIFF"  # the control: our own output downloads
    outputs = folder / "outputs"
    attempts = [
        "/gradio_api/file=../../../../../../etc/passwd",
        "/gradio_api/file=/etc/passwd",
        "/gradio_api/file=%2e%2e/%2e%2e/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "/gradio_api/file=..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/gradio_api/file=....//....//....//etc/passwd",
        f"/gradio_api/file={folder}/secret.txt",
        f"/gradio_api/file={outputs}/../secret.txt",
        f"/gradio_api/file={outputs}/audio/../../secret.txt",
        f"/gradio_api/file={urllib.parse.quote(str(outputs))}%2f..%2fsecret.txt",
        f"/gradio_api/file={ROOT}/app.py",
        "/gradio_api/file=app.py",
        "/gradio_api/file=chattts_lab/history/store.py",
        f"/gradio_api/file={Path.home()}/.cache/chattts_lab",
        "/file=../../../../etc/passwd",
        "/gradio_api/file/../../../../etc/passwd",
        "/static/../../../../etc/passwd",
        "/assets/../../../../etc/passwd",
        "/v1/../../../../etc/passwd",
    ]
    for path in attempts:
        status, _, body = http(url, path, headers=cookie)
        leaked = b"root:" in body or b"TOP-SECRET" in body or b"def main" in body or b"import " in body
        assert not leaked, f"{path} leaked a file ({status})"
        assert status != 200 or b"<html" in body[:2000].lower(), f"{path}: {status} {body[:120]!r}"


def test_uploads_over_the_size_limit_are_refused_and_small_ones_accepted(auth_app):
    from chattts_lab.serve.uploads import MAX_UPLOAD_BYTES

    url, _, _ = auth_app
    cookie = _cookie(url)

    def upload(size: int):
        boundary = "lab-boundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"files\"; filename=\"clip.wav\"\r\n"
                f"Content-Type: audio/wav\r\n\r\n").encode() + b"\0" * size + f"\r\n--{boundary}--\r\n".encode()
        return http(url, "/gradio_api/upload", "POST", body,
                    {"Content-Type": f"multipart/form-data; boundary={boundary}", "Cookie": cookie})

    status, _, body = upload(MAX_UPLOAD_BYTES + 1024)
    assert status == 413 and b"maximum allowed size" in body
    status, _, body = upload(1000)
    assert status == 200 and json.loads(body)[0].endswith("clip.wav")


def test_monitoring_is_off_by_default(auth_app):
    url, _, _ = auth_app
    cookie = {"Cookie": _cookie(url)}
    for path in ("/monitoring", "/gradio_api/monitoring", "/monitoring/summary", "/gradio_api/monitoring/summary"):
        status, _, body = http(url, path, headers=cookie)
        assert status in (403, 404, 405) or b"not enabled" in body.lower(), f"{path}: {status} {body[:200]!r}"


def test_out_of_memory_is_a_clear_message_and_the_server_keeps_serving(auth_app, logged_in):
    """A real allocation failure: the app's address space is capped (prlimit) just above what it uses."""
    from gradio_client.exceptions import AppError

    url, _, proc = auth_app
    app = psutil.Process(server_pid(url))
    assert app.pid == proc.pid
    logged_in.predict("Warm.", "Aria", *SYNTH.values(), api_name="/synthesize")
    unlimited = app.rlimit(psutil.RLIMIT_AS)
    app.rlimit(psutil.RLIMIT_AS, (app.memory_info().vms + 150 * 2**20, unlimited[1]))
    try:
        text = ". ".join(f"Sentence number {i} is here" for i in range(64))  # 64 sentences: one batch of 64
        with pytest.raises(AppError, match="out of memory") as err:
            logged_in.predict(text, "Aria", *{**SYNTH, "max_new_token": 2048, "split": True}.values(),
                              api_name="/synthesize")
        assert "server is still up" in str(err.value)
        # The OpenAI-compatible route says so too; "stream": false makes it one batch of 64, like the UI's.
        body = {"input": text, "response_format": "wav", "max_new_token": 2048, "stream": False}
        status, _, body = http(url, "/v1/audio/speech", "POST", json.dumps(body).encode(),
                               {"Content-Type": "application/json", "Authorization": f"Bearer {USER}:{PASSWORD}"})
        assert status == 503 and "out of memory" in json.loads(body)["error"]["message"], body[:300]
    finally:
        app.rlimit(psutil.RLIMIT_AS, unlimited)
    path, m = logged_in.predict("Still here.", "Aria", *SYNTH.values(), api_name="/synthesize")
    assert app.is_running() and m["tokens"][0] > 0 and Path(path).stat().st_size > 44


def test_openai_clients_without_the_key_are_refused_and_with_it_served(auth_app):
    import openai

    url, _, proc = auth_app
    assert PASSWORD not in " ".join(psutil.Process(proc.pid).cmdline())  # the login came from the environment
    for key in ("no-key", f"{USER}:wrong"):
        stranger = openai.OpenAI(base_url=url + "v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
            stranger.audio.speech.create(model="tts-1", voice="Aria", input="Let me in.")
    friend = openai.OpenAI(base_url=url + "v1", api_key=f"{USER}:{PASSWORD}", max_retries=0, timeout=600)
    audio = friend.audio.speech.create(model="tts-1", voice="Aria", input="Let me in.", response_format="wav",
                                       extra_body={"max_new_token": 8})
    assert audio.content[:4] == b"RIFF"


def test_the_auth_flag_and_the_environment_are_one_setting(monkeypatch):
    """The app above got its login from CHATTTS_LAB_AUTH; --auth sets the same thing (and wins over it)."""
    from app import parse_args
    from chattts_lab.serve.policy import ServingPolicy

    def auth(*argv):
        return ServingPolicy.from_args(parse_args(list(argv))).auth

    monkeypatch.delenv("CHATTTS_LAB_AUTH", raising=False)
    assert auth() is None
    assert auth("--auth", f"{USER}:{PASSWORD}") == f"{USER}:{PASSWORD}"
    monkeypatch.setenv("CHATTTS_LAB_AUTH", f"{USER}:{PASSWORD}")
    assert auth() == f"{USER}:{PASSWORD}"
    assert auth("--auth", "bob:other") == "bob:other"
