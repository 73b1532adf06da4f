#!/usr/bin/env bash
# The wheels `python -m bench` needs on the lent GPU machine and its image lacks, downloaded into <repo>/.whl.
#
#     bash scripts/gpu/prepare_wheels.sh        # here, once, where pip reaches PyPI (a few seconds, about 15 MB)
#
# The nvidia-h200 image (/work/.library/device/KINDS.md) has Python 3.12, torch 2.11 (CUDA 13), torchaudio,
# transformers, numpy, pandas, scipy, numba, einops, sympy, narwhals, psutil, tqdm, onnx and onnxruntime (CPU), but
# not ChatTTS and its own needs, pydantic, soundfile or plotly (carried.txt); nothing can be downloaded there. `.whl/` is git-ignored (.gitignore), so
# it travels only when a device call names it in `carry`; scripts/gpu/sweep.sh installs it there into /tmp/site.
# `--no-deps`: every missing dependency is named in carried.txt, pinned to the version this project's venv runs; the check at
# the end fails if a wheel needs something that is neither carried nor in the image.
set -euo pipefail
ROOT=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
DEST="$ROOT/.whl"
# a Python with pip and packaging: the project venv where there is one
PY=${PYTHON:-$([ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python3)}
# The device image's Python and platform (the device README's flags: pip matches manylinux_2_N exactly).
TARGET=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# What is carried (scripts/gpu/carried.txt) and what the image has (scripts/gpu/image_packages.txt).
HERE=$(dirname "$0")
mapfile -t WHEELS < <(grep -v -e '^#' -e 'sdist' "$HERE/carried.txt" | awk 'NF {print $1}')
mapfile -t SOURCE_ONLY < <(grep -v '^#' "$HERE/carried.txt" | awk '$2 == "sdist" {print $1}')
IMAGE_HAS=$(grep -v '^#' "$HERE/image_packages.txt" | tr '\n' ' ')

rm -rf "$DEST"
mkdir -p "$DEST"
"$PY" -m pip download -q --no-deps --only-binary=:all: "${TARGET[@]}" -d "$DEST" "${WHEELS[@]}"
"$PY" -m pip wheel -q --no-deps -w "$DEST" "${SOURCE_ONLY[@]}"

# Every Requires-Dist of a carried wheel (markers evaluated for Linux x86-64, Python 3.12; extras skipped) must be
# carried too or be in the image: otherwise the import fails there, minutes into a lease.
"$PY" - "$DEST" "$IMAGE_HAS" <<'EOF'
import sys, zipfile
from pathlib import Path
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename

dest, image = Path(sys.argv[1]), {canonicalize_name(n) for n in sys.argv[2].split()}
env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux", "platform_system": "Linux",
       "platform_machine": "x86_64", "implementation_name": "cpython", "os_name": "posix", "extra": ""}
wheels = sorted(dest.glob("*.whl"))
carried = {canonicalize_name(parse_wheel_filename(w.name)[0]) for w in wheels}
if len(carried) != len(wheels):
    sys.exit(f"two versions of one package in {dest}: the install there would stop")
missing = []
for wheel in wheels:
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(meta).decode().splitlines()
    for line in lines:
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            needed = req.marker is None or req.marker.evaluate(env)
            if needed and canonicalize_name(req.name) not in carried | image:
                missing.append(f"{wheel.name} needs {req}")
if missing:
    sys.exit("not carried and not in the image:\n  " + "\n  ".join(missing))
print(f"{len(wheels)} wheels, every requirement carried or in the image")
EOF

du -ch "$DEST"/*.whl | tail -1 | sed 's/total/in .whl (carried; the device call takes 64 MiB in all)/'
(cd "$ROOT" && git ls-files -z | du -ch --files0-from=- | tail -1 | sed 's/total/tracked by git (travels too)/')
