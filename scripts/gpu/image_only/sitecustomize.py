"""The dry run of scripts/gpu/sweep.sh imports only what the lent GPU will have: its image and the carried wheels.

On PYTHONPATH (sweep.sh puts it there when CHATTTS_LAB_GPU_DRY=1), Python imports this at start-up in every process,
the sweep's cells too. When the project's code (or a carried package, or `python -c`) imports a module of a
distribution that is installed here but neither in the image (../image_packages.txt) nor carried (../carried.txt),
the module looks absent, as it will there: a missing wheel fails here, in the dry run, and not minutes into a lease
(pydantic and soundfile once did). What the image's own packages import is left alone: their versions here are newer
than there and need other things (huggingface_hub here needs httpx2; the image's older one does not), so the check
is on the names this project and its carried wheels import, not on versions. The standard library and the project's
own modules belong to no distribution and import as usual.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import re
import sys
from pathlib import Path

from packaging.utils import canonicalize_name  # in the image too; prepare_wheels.sh's check uses it as well

GPU = Path(__file__).resolve().parents[1]
PROJECT = {"app", "bench", "chattts_lab", "webui", "scripts", "tests", "__main__"}


def _names(file: str) -> set[str]:
    """Canonical distribution names, one per line (the first word; '#' lines are comments)."""
    lines = (GPU / file).read_text().splitlines()
    words = (re.split(r"[=<>\s]", line.strip(), maxsplit=1)[0] for line in lines if line.strip()[:1] not in ("", "#"))
    return {canonicalize_name(w) for w in words}


def _modules_by_distribution() -> dict[str, list[str]]:
    """Top-level module -> the canonical names of the distributions installed here that provide it."""
    return {m: [canonicalize_name(d) for d in dists] for m, dists in importlib.metadata.packages_distributions().items()}


class ImageOnlyPathFinder(importlib.machinery.PathFinder):
    """The path finder, blind to refused modules when a guarded importer asks: they look absent ("No module
    named ..."), as on the GPU machine."""

    refused: set[str] = set()  # top-level modules the GPU machine will not have
    guarded: set[str] = set()  # top-level modules whose imports are checked: the project's and the carried ones

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in cls.refused and _importer().partition(".")[0] in cls.guarded:
            return None
        return super().find_spec(fullname, path, target)


def _importer() -> str:
    """The module whose code asked for the import: the first frame outside importlib (and outside this file)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if not (name.startswith("importlib") or name.startswith("_frozen_importlib") or frame.f_code.co_filename == __file__):
            return name
        frame = frame.f_back
    return ""


def install() -> None:
    modules = _modules_by_distribution()
    allowed, carried = _names("image_packages.txt") | _names("carried.txt"), _names("carried.txt")
    ImageOnlyPathFinder.refused = {m for m, dists in modules.items() if not set(dists) & allowed}
    ImageOnlyPathFinder.guarded = PROJECT | {m for m, dists in modules.items() if set(dists) & carried}
    sys.meta_path[:] = [ImageOnlyPathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]


install()
