"""README.md's claims, checked against the code: every flag it shows exists in that program's argparse, every path
and docs/ link it names exists, and the limits, defaults and lists it states in sentences equal what the code uses.
Its tables of limits, precisions and options are written by the code (scripts/readme.py) and held by
tests/docs/test_readme_generated.py, not matched here. No model loads here (seconds). Rewording the README may mean
rewording a pattern below; a claim that is no longer true fails.
tests/docs/test_readme_limits.py checks the limits' behaviour at the numbers read here.

The sections that moved out of the README into docs/ (MOVED_DOCS) are checked where they now live: their flags,
paths and anchors as the README's, and each number they state against the code, as it was checked in the README."""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Sections moved from the README (the README keeps a short paragraph and a link to each).
MOVED_DOCS = ("docs/ray.md", "docs/serving.md", "docs/quality.md", "docs/measuring.md", "docs/openai-api.md")
TEXTS = {"README.md": README, **{doc: (ROOT / doc).read_text(encoding="utf-8") for doc in MOVED_DOCS}}


# ----------------------------------------------------------------------------------------------
# Reading the README


def readme_number(pattern: str, doc: str = "README.md") -> float:
    """The number the README (or one of MOVED_DOCS) states where `pattern` (a regex with one group, the number)
    matches in its text with each run of whitespace as one space; it must match exactly once, so a claim cannot go
    missing or say two things. Thousands separators are dropped."""
    found = re.findall(pattern, " ".join(TEXTS[doc].split()))  # however its lines are wrapped
    assert len(found) == 1, f"{doc} should state {pattern!r} once, found {len(found)}: {found}"
    return float(found[0].replace(",", ""))


def says(phrase: str, doc: str = "README.md") -> bool:
    """Whether the README (or one of MOVED_DOCS) says `phrase`, however its lines are wrapped."""
    return " ".join(phrase.split()) in " ".join(TEXTS[doc].split())


def fenced_lines(text: str = README) -> list[str]:
    """Lines of the text's fenced code blocks, continuation backslashes joined."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line)
    return _join_continued(lines)


def _join_continued(lines: list[str]) -> list[str]:
    joined, pending = [], ""
    for line in lines:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
        else:
            joined.append(pending + line)
            pending = ""
    return joined


def inline_spans(text: str = README) -> list[str]:
    """Text in single backticks outside the fenced blocks (a span may wrap onto the next line)."""
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return [s.replace("\n", " ") for s in re.findall(r"`([^`]+)`", prose)]


FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

# Where a command starts, and which program reads the flags after it (None: not ours, its flags are not checked).
PROGRAMS = [
    (r"python -m bench\.independent_bandwidth", "bench.independent_bandwidth"),
    (r"python -m bench\.independent\b", "bench.independent"),
    (r"python -m bench serve|\./run bench serve", "bench serve"),
    (r"python -m bench\b|\./run bench\b", "bench"),
    (r"python -m chattts_lab\.serve\.rayserve", "chattts_lab.serve.rayserve"),
    (r"(?:python |\./run )?app\.py|\./run app\b", "app"),
    (r"ray start|pip install|\./run tests|curl\b", None),
]
MARKER = re.compile("|".join(f"(?P<p{i}>{rx})" for i, (rx, _) in enumerate(PROGRAMS)))


def commands(text: str) -> list[tuple[str | None, list[str]]]:
    """(program, flags) for each command in one line of text, the flags being those up to the next command."""
    found = []
    marks = list(MARKER.finditer(text))
    for m, nxt in zip(marks, marks[1:] + [None]):
        program = PROGRAMS[int(m.lastgroup[1:])][1]
        found.append((program, FLAG.findall(text[m.end(): nxt.start() if nxt else len(text)])))
    return found


# ----------------------------------------------------------------------------------------------
# The programs' parsers, built without running the programs


class _Parsed(Exception):
    def __init__(self, parser):
        self.parser = parser


def _caught_parser(run, monkeypatch) -> argparse.ArgumentParser:
    """The parser `run()` builds: its parse_args is stopped (and the parser kept) before anything else runs."""
    def stop(self, *args, **kwargs):
        raise _Parsed(self)

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", stop)
        m.setattr(argparse.ArgumentParser, "parse_known_args", stop)
        try:
            run()
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{run} returned without parsing a command line")


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]
    return None


def parser_of(program: str, monkeypatch) -> argparse.ArgumentParser:
    if program in ("bench", "bench serve"):
        bench = importlib.import_module("bench.cli").build_parser()
        if program == "bench":
            return bench
        serve = _subcommand(bench, "serve")  # `serve` as an argparse subcommand, else its own module's parser
        return serve or importlib.import_module("bench.serving.cli").build_parser()
    module = importlib.import_module(program)
    if program == "app" or program == "chattts_lab.serve.rayserve":
        return _caught_parser(lambda: module.parse_args([]), monkeypatch)
    return _caught_parser(lambda: module.main([]), monkeypatch)


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def default(parser: argparse.ArgumentParser, flag: str, spec_cls=None):
    """What the program uses when `flag` is not given: argparse's default, else (options built from a spec with
    argparse.SUPPRESS) the spec field's own default."""
    action = next(a for a in parser._actions if flag in a.option_strings)
    if action.default is not argparse.SUPPRESS:
        return action.default
    return getattr(spec_cls(), action.dest)


ALL = ["bench", "bench serve", "app", "chattts_lab.serve.rayserve", "bench.independent", "bench.independent_bandwidth"]


@pytest.fixture(scope="module")
def parsers():
    with pytest.MonkeyPatch.context() as mp:
        return {name: parser_of(name, mp) for name in ALL}


# ----------------------------------------------------------------------------------------------
# Flags


def test_the_command_lines_found_cover_every_program():
    """The scan below reads the README's commands: it must find each program's (else it would check nothing)."""
    seen = {p for line in fenced_lines() + inline_spans() for p, flags in commands(line) if flags}
    assert {"bench", "bench serve", "app", "chattts_lab.serve.rayserve"} <= seen, seen
    ray = TEXTS["docs/ray.md"]  # and the Ray walkthrough's, where it moved
    assert {"bench", "bench serve", "chattts_lab.serve.rayserve"} <= {
        p for line in fenced_lines(ray) + inline_spans(ray) for p, flags in commands(line) if flags}


def test_every_flag_of_a_command_shown_exists_in_that_program(parsers):
    wrong = [f"{doc}: {program}: {flag}   (in: {line.strip()[:90]})"
             for doc, text in TEXTS.items()
             for line in fenced_lines(text) + inline_spans(text)
             for program, flags in commands(line) if program
             for flag in flags if flag not in options(parsers[program])]
    assert not wrong, "README (or a doc moved from it) shows flags its programs do not have:\n" + "\n".join(wrong)


def test_every_flag_named_in_prose_exists_in_one_of_the_programs(parsers):
    known = set().union(*(options(p) for p in parsers.values())) | {"--head", "--address", "--resources", "--num-cpus",
                                                                    "--generate"}  # ray start's, ray get-auth-token's
    for doc, text in TEXTS.items():
        named = {f for span in inline_spans(text) for f in FLAG.findall(span)} | set(FLAG.findall(text))
        assert named - known == set(), f"{doc} names flags no program has: {sorted(named - known)}"


def test_the_scan_would_catch_a_flag_that_is_not_there(parsers):
    (program, flags), = commands("python -m bench --model synthetic --no-such-flag 3")
    assert program == "bench" and "--no-such-flag" in flags and "--no-such-flag" not in options(parsers["bench"])
    assert [p for p, _ in commands("python -m bench serve --url U && python -m chattts_lab.serve.rayserve --stop")] == [
        "bench serve", "chattts_lab.serve.rayserve"]


# ----------------------------------------------------------------------------------------------
# Paths and links

# Paths the README names that a run makes, or that are examples, not files of this repository.
NOT_IN_REPO = {"../", "~/.ray/auth_token", "outputs/", "outputs/voices", "results/lab.sqlite", "asset/", "mine.json", "theirs.json",
               ".venv", "~/.cache/chattts_lab", "~/.cache/torch_extensions", ".whl/",
               "2Noise/ChatTTS"}  # the Hugging Face repository of the released weights
PATHLIKE = re.compile(r"^[\w.~-]+(?:/[\w.-]*)+$|^[\w-]+\.(?:py|md|txt|sh|json|png|ini|cpp)$")


# Inside commands too: any token that starts with one of the repository's source or docs folders.
IN_FOLDER = re.compile(r"(?<![\w/.-])((?:docs|scripts|tests|bench|webui|chattts_lab)/[\w./-]*[\w/])")


def named_paths(text: str = README) -> set[str]:
    spans = [s.strip() for s in inline_spans(text)]
    whole = {s for s in spans if PATHLIKE.match(s) and not s.startswith(("http", "/", "-"))}
    return whole | {p for t in spans + fenced_lines(text) for p in IN_FOLDER.findall(t)}


def test_every_file_or_folder_the_readme_names_exists():
    paths = named_paths()
    assert {"scripts/gpu/sweep.sh", "scripts/make_screenshots.py", "packages.txt"} <= paths  # the scan finds them
    missing = [p for p in sorted(paths - NOT_IN_REPO) if not (ROOT / p).exists()]
    assert not missing, f"README names paths that are not in the repository: {missing}"


def test_every_file_or_folder_a_moved_section_names_exists():
    """Paths in code spans of the docs moved from the README are the repository's, as in the README."""
    assert {"requirements-cluster.txt", "tests/serve/test_continuous.py"} <= named_paths(TEXTS["docs/ray.md"]) | named_paths(
        TEXTS["docs/serving.md"])  # the scan finds them
    missing = [f"{doc}: {p}" for doc in MOVED_DOCS for p in sorted(named_paths(TEXTS[doc]) - NOT_IN_REPO)
               if not (ROOT / p).exists()]
    assert not missing, f"docs name paths that are not in the repository: {missing}"


def test_every_link_and_image_resolves():
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert any(t.startswith("docs/measurements/") for t in local) and any(t.startswith("docs/engines/") for t in local)
    assert set(MOVED_DOCS) <= set(local), "the README links to every section moved out of it"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that are not there: {missing}"


def test_links_inside_docs_resolve():
    broken = []
    for md in sorted((ROOT / "docs").rglob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", md.read_text(encoding="utf-8")):
            if not target.startswith(("http://", "https://")) and not (md.parent / target).exists():
                broken.append(f"{md.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def _slugs(md: Path) -> set[str]:
    """The anchors of a Markdown file's headings (GitHub's slugs: lower case, punctuation dropped, spaces to -)."""
    def slug(heading: str) -> str:
        return re.sub(r"\s", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))

    text = re.sub(r"^```.*?^```", "", md.read_text(encoding="utf-8"), flags=re.S | re.M)
    return {slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_in_page_anchors_exist():
    """Each #anchor link points at a heading."""
    anchors = re.findall(r"\]\(#([^)]+)\)", README)
    assert anchors and [a for a in anchors if a not in _slugs(ROOT / "README.md")] == []


def test_anchors_between_the_readme_and_docs_exist():
    """A link FILE.md#anchor (README to docs, docs to the README or each other) points at a heading of that file."""
    broken, seen = [], 0
    for md in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        for target, anchor in re.findall(r"\]\(([^)#\s]*\.md)#([^)\s]+)\)", md.read_text(encoding="utf-8")):
            seen += 1
            if (md.parent / target).exists() and anchor not in _slugs(md.parent / target):
                broken.append(f"{md.relative_to(ROOT)} -> {target}#{anchor}")
    assert seen and not broken, broken


# ----------------------------------------------------------------------------------------------
# Limits and defaults


def test_the_upload_limit_gradio_enforces_is_the_one_the_readme_table_shows():
    """The limits table is generated (scripts/readme.py); Gradio enforces uploads from a text of its own."""
    from chattts_lab.serve import openai_api, uploads

    assert uploads.MAX_UPLOAD == f"{uploads.MAX_UPLOAD_BYTES // 2**20}mb"  # what Gradio enforces (the 413)
    assert readme_number(r"\*\*Input\*\*: at most ([\d,]+) characters") == openai_api.MAX_INPUT_CHARS  # the /v1 list


def test_the_bench_defaults_in_prose_are_the_benchs(parsers):
    """The timing options' table is generated (scripts/readme.py); docs/measuring.md and the history's path say
    theirs in sentences."""
    from chattts_lab.sweep.spec import SweepSpec

    bench = parsers["bench"]
    assert readme_number(r"`--timeout` \(default (\d+) s\)", "docs/measuring.md") == default(bench, "--timeout", SweepSpec)
    assert readme_number(r"`--drift-threshold`\s+\(default (\d+) %\)", "docs/measuring.md") == \
        default(bench, "--drift-threshold", SweepSpec)
    assert says("history kept in --db (default results/lab.sqlite)")
    assert default(bench, "--db", SweepSpec) == "results/lab.sqlite"


def test_the_grid_limits_and_sweep_thresholds_are_the_codes():
    from chattts_lab.sweep import grid
    from chattts_lab.sweep import interleave
    from chattts_lab.sweep import results
    from chattts_lab.history.compare import DEFAULT_DRIFT_THRESHOLD_PCT
    from chattts_lab.sweep.spec import SweepSpec

    assert readme_number(r"A grid over (\d+) cells") == grid.MAX_CELLS
    assert readme_number(r"cells or (\d+) hours") == grid.MAX_HOURS
    assert readme_number(r"fit in memory \((\d+) % of what is available", "docs/measuring.md") / 100 == \
        interleave.MEMORY_HEADROOM
    assert says("below half its thread\n  count") and results.CPU_SHARE_FLOOR == 0.5
    assert says("below half its thread count", "docs/measuring.md")
    assert SweepSpec.drift_threshold_pct == DEFAULT_DRIFT_THRESHOLD_PCT  # the tab's and the CLI's threshold


def test_the_audio_arithmetic_is_the_codes():
    from chattts_lab.engines.lab.stream import FIRST_CHUNK
    from chattts_lab.metrics import STEPS_PER_AUDIO_SECOND

    assert readme_number(r"ChatTTS makes ([\d.]+) GPT steps per second") == STEPS_PER_AUDIO_SECOND
    assert readme_number(r"audio tokens, ([\d.]+) per second", "docs/openai-api.md") == STEPS_PER_AUDIO_SECOND
    assert readme_number(r"a step\s+under (\d+) ms is real time") == int(1000 / STEPS_PER_AUDIO_SECOND)
    assert readme_number(r"send their first chunk after (\d+) steps") == FIRST_CHUNK


def test_the_gradio_api_examples_pass_what_the_apis_take():
    """The parameters and defaults are a generated table (scripts/readme.py); the examples beside it must fit them."""
    from webui.benchmark.sweep_run import api_run_sweep
    from webui.synthesis.handlers import api_synthesize

    for fn, api_name in ((api_synthesize, "/synthesize"), (api_run_sweep, "/run_sweep")):
        taken = list(inspect.signature(fn).parameters)[1:]
        calls = re.findall(rf'c\.predict\(([^)]*)api_name="{api_name}"([^)]*)\)', README)
        assert len(calls) >= 2, api_name  # a short call and a longer one, each
        for call in calls:
            parsed = ast.parse(f'f({call[0]}api_name="{api_name}"{call[1]})').body[0].value
            named = {k.arg for k in parsed.keywords} - {"api_name"}
            assert len(parsed.args) <= len(taken) and named <= set(taken), (api_name, call)
    assert re.search(r'c\.predict\([^)]*api_name="/run_sweep", passes=1\)', README)  # repeats shown where it applies


def test_the_openai_route_lists_are_the_codes():
    from chattts_lab import audio
    from chattts_lab.voices import PRESET_VOICES
    from chattts_lab.serve.openai_api import chattts_speed

    voices = re.search(r"\*\*Voices\*\*: ([\w, ]+), `seed:N`", README).group(1)
    assert voices.split(", ") == list(PRESET_VOICES)
    formats = re.search(r"\*\*Formats\*\*: ([\w,\s]+)\.", README).group(1)
    assert re.split(r",\s+", formats) == list(audio.FORMATS)
    assert says("pcm, wav and mp3 are sent as they are generated") and audio.STREAM_FORMATS == ("pcm", "wav", "mp3")
    request = " ".join(TEXTS["docs/openai-api.md"].split())  # the request in detail moved there
    mapping = re.search(r"2 per doubling above \(rounded\): (.*?)\.\s", request).group(1)
    for given, level in re.findall(r"([\d.]+) → (\d)", mapping):
        assert chattts_speed(float(given)) == int(level), given


def test_the_served_default_before_any_sweep_is_the_one_stated(tmp_path):
    from chattts_lab.serve.runtime import engines_for, serving_choice

    assert says("The app serves its **default**, lab int8 on the lab's kernels for this CPU")
    choice = serving_choice(tmp_path / "empty.sqlite", "synthetic-tiny")
    lab_runs = "lab" in engines_for("cpu")
    assert (choice.settings.engine, choice.settings.precision) == (("lab", "int8") if lab_runs else ("stock", "fp32"))
    assert says("that button offers lab int4")
    if lab_runs:
        assert (choice.fastest.engine, choice.fastest.precision) == ("lab", "int4")
        assert "kernels" in choice.reason and "lab fp32 computes stock fp32's audio" in choice.reason


def test_the_quick_sweep_is_the_one_described():
    from webui.benchmark.tab import quick_form

    form = quick_form()
    assert says("fills the form with stock against lab at fp32, int8 and int4, batch 1 (six cells, stock int4 a row "
                "that says stock has none: under a minute on 2 quiet AVX-512 cores with the default weights, 15 s on "
                "synthetic-tiny")
    run = (ROOT / "docs/measurements/2026-12-06-one-time-costs.md").read_text(encoding="utf-8")
    assert "| synthetic-tiny | **27.3 s**" in run and "**14.8 s**" in run and "**52.7 s**" in run
    assert (form.engines, form.precisions, form.batches) == (("stock", "lab"), ("fp32", "int8", "int4"), "1")
    assert len(re.findall(r"(?i)quick sweep[^.]*minute", README)) == 1  # its duration, stated once


def test_the_space_front_matter_matches_the_pins():
    front = README.split("---")[1]
    sdk = re.search(r"^sdk_version: (\S+)$", front, re.M).group(1)
    assert f"gradio=={sdk}" in (ROOT / "requirements.txt").read_text()
    assert re.search(r'^python_version: "3\.11"$', front, re.M) and "app_file: app.py" in front
    assert "ffmpeg" in (ROOT / "packages.txt").read_text()


def test_the_headline_table_is_the_measured_one():
    """Each headline row is the row of the sweep it cites, in docs/measurements (RTF, ms per step, peak RSS)."""
    def rows(text: str, header: str) -> dict:
        table = text[text.index(header):].split("\n\n")[0].splitlines()[2:]
        return {tuple(c.strip() for c in line.strip("|").split("|")[:2]): [c.strip().strip("*") for c in line.strip("|").split("|")]
                for line in table}

    headline = rows(README, "| engine | precision | RTF |")
    source = (ROOT / "docs/measurements/2026-12-01-three-engines.md").read_text(encoding="utf-8")
    measured = rows(source[source.index("commit 222cfb1"):], "| engine | precision |")
    assert says("2026-12-01 at commit 222cfb1") and len(headline) == 8 and set(headline) == set(measured)
    stock_p50 = float(measured[("stock", "fp32")][3])
    for key, (_, _, rtf, step, speedup, rss) in headline.items():
        _, _, first, p50, m_rtf, m_step, m_rss, _ = measured[key]
        assert (rtf, step, rss) == (m_rtf, m_step, m_rss), key
        assert speedup == f"{stock_p50 / float(p50):.1f}", key  # "p50 x stock fp32"


# ----------------------------------------------------------------------------------------------
# Numbers in the sections moved to docs/


def test_the_bandwidth_reads_are_the_codes():
    from chattts_lab.trackers.roofline import READ_REPEATS

    assert readme_number(r"the median of (\d+) reads", "docs/measuring.md") == READ_REPEATS


def test_the_prefill_slice_in_docs_serving_is_the_schedulers():
    from chattts_lab.serve.scheduler import PREFILL_SLICE

    assert readme_number(r"\(\*\*chunked prefill\*\*: (\d+) prompt positions per loop iteration", "docs/serving.md") \
        == PREFILL_SLICE


def test_the_batching_default_in_docs_serving_is_the_apps(parsers):
    """The flags' defaults are docs/serving.md's generated table (scripts/readme.py); the scheduling it names in
    prose is the app's."""
    from chattts_lab.serve.policy import ServingPolicy

    app, doc = parsers["app"], "docs/serving.md"
    assert default(app, "--batching", ServingPolicy) == "continuous" and says("(**continuous batching**, the default;", doc)


def test_the_serving_benchmark_defaults_in_docs_serving_are_the_codes(parsers):
    from bench.serving.listening import CONTINUITY_LIMIT_S
    from bench.serving.spec import ServeSpec

    serve, doc = parsers["bench serve"], "docs/serving.md"
    assert readme_number(r"`--slo-ttfa-p99`, default ([\d.]+) s", doc) == default(serve, "--slo-ttfa-p99", ServeSpec)
    assert readme_number(r"`--slo-continuity`, default ([\d.]+) %", doc) == default(serve, "--slo-continuity", ServeSpec)
    assert readme_number(r"continuous \(no stall over (\d+) ms\)", doc) == CONTINUITY_LIMIT_S * 1000
    assert says("`--batching continuous,request` (the default)", doc)
    assert ",".join(default(serve, "--batching", ServeSpec)) == "continuous,request"


def test_the_quality_set_and_floor_in_docs_quality_are_the_codes():
    from chattts_lab.history.recommend import MOS_DROP, WER_RISE_PTS
    from chattts_lab.quality.sweep import QUALITY_TEXTS, QUALITY_VOICES

    doc = "docs/quality.md"
    assert says("the same fixed English texts (short, medium, long) in two voices", doc)
    assert [length for length, _ in QUALITY_TEXTS] == ["short", "medium", "long"] and len(QUALITY_VOICES) == 2
    assert readme_number(r"\(default: ([\d.]+) MOS and \d+ WER points", doc) == MOS_DROP
    assert readme_number(r"\(default: [\d.]+ MOS and (\d+) WER points", doc) == WER_RISE_PTS


def test_a_ray_serve_replica_takes_the_requests_docs_ray_states():
    from chattts_lab.serve.policy import SchedulerPolicy, ServingPolicy
    from chattts_lab.serve.rayserve import ServePlan, parse_args, plan_from_args
    from chattts_lab.serve.runtime import RuntimeSettings

    doc = "docs/ray.md"
    factor = readme_number(r"A replica then takes\s+up to (\d+) x `--max-batch` requests", doc)
    for max_batch in (1, 8):  # request-level: stock always, lab (and onnx) with --batching request
        for plan in (ServePlan(ServingPolicy(max_batch=max_batch)),
                     ServePlan(ServingPolicy(batching="request", max_batch=max_batch), RuntimeSettings(engine="lab"))):
            assert not plan.continuous() and plan.replica_options()["max_ongoing_requests"] == factor * max_batch
    continuous = ServePlan(ServingPolicy(max_rows=4, max_queue=6), RuntimeSettings(engine="lab"))
    assert continuous.continuous() and continuous.replica_options()["max_ongoing_requests"] == 10
    assert plan_from_args(parse_args([])).policy.batching == "continuous" == ServingPolicy.batching
    assert readme_number(r"`--max-rows` texts at once \(default (\d+)\)", doc) == SchedulerPolicy.max_rows
    assert readme_number(r"`--max-queue` requests waiting \(default (\d+)\)", doc) == SchedulerPolicy.max_queue


def test_the_ray_walkthroughs_figures_are_its_measured_run():
    """docs/ray.md's one-machine try-out quotes the serving run kept in docs/measurements (rounded)."""
    doc = "docs/ray.md"
    run = (ROOT / "docs/measurements/2026-12-01-ray-serve-serving-bench.md").read_text(encoding="utf-8")
    header = "| max_batch | users | requests | ok |"
    lines = run[run.index(header):].split("\n\n")[0].splitlines()
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in lines[2:]]
    served = readme_number(r"served (\d+) of \d+ streamed requests", doc)
    sent = readme_number(r"served \d+ of (\d+) streamed requests", doc)
    assert served == sum(int(r["ok"]) for r in rows) and sent == sum(int(r["requests"]) for r in rows)
    ttfa = {int(r["users"]): float(r["ttfa_p50_s"]) for r in rows}
    assert readme_number(r"time to first audio p50 ([\d.]+) s for one user", doc) == round(ttfa[1], 2)
    assert readme_number(r"s for one user and ([\d.]+) s for two", doc) == round(ttfa[2], 2)


def test_every_chattts_header_named_is_one_the_routes_send():
    sent = set()
    for source in (ROOT / "chattts_lab" / "serve").glob("*.py"):
        sent |= set(re.findall(r"X-ChatTTS-[A-Za-z-]*[A-Za-z]", source.read_text(encoding="utf-8")))
    named = {h for text in TEXTS.values() for h in re.findall(r"X-ChatTTS-[A-Za-z-]*[A-Za-z]", text)}
    assert {"X-ChatTTS-First-Audio-S", "X-ChatTTS-Scheduling"} <= named and named <= sent, named - sent
