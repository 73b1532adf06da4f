"""The project installs as a package: `pip install .` puts chattts_lab, bench and webui on the path, and the
README's "The Python library" snippet runs outside the checkout.

Offline and fast: a fresh venv sees the test venv's site-packages (the installed dependencies) through a .pth
file, the way `--system-site-packages` would, and the project is installed into it with `--no-deps`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "requirements.txt", "requirements-cluster.txt", "README.md", "LICENSE", "app.py",
           "chattts_lab", "bench", "webui")


def readme_library_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### The Python library"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def _venv_with_dependencies(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    (Path(purelib) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_pip_install_puts_the_library_on_the_path_and_the_readme_snippet_runs_elsewhere(tmp_path):
    src = tmp_path / "src"  # a copy: building writes build/ and *.egg-info next to the sources
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, src / name)
    python = _venv_with_dependencies(tmp_path / "venv")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", str(src)], capture_output=True, text=True, env=env, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # The snippet's imports, run (a model load and a synthesis are the library tests' work, not the package's);
    # the rest compiled, so that a name it uses is one the imports give.
    snippet = readme_library_snippet()
    imports = "\n".join(line for line in snippet.splitlines() if line.startswith(("from ", "import ")))
    assert "chattts_lab" in imports
    probe = (f"{imports}\ncompile({snippet!r}, 'README', 'exec')\n"
             "import importlib.util, chattts_lab, bench.cli\n"
             "assert importlib.util.find_spec('chattts_lab.serve.openai_api') and importlib.util.find_spec('app')\n"
             "assert importlib.util.find_spec('webui.synthesis.tab') and importlib.util.find_spec('bench.serving.loadtest')\n"
             "print('FROM', chattts_lab.__file__)\n")
    run = subprocess.run([str(python), "-c", probe], cwd=elsewhere, capture_output=True, text=True, env=env,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    where = run.stdout.split("FROM ")[-1].strip()
    assert where.startswith(str(tmp_path / "venv")), where  # the installed copy, not the checkout
    assert (Path(where).parent / "engines" / "lab" / "kernels.cpp").exists()  # package data: the lab engine's kernels
