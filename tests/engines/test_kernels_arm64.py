"""The lab's ARM64 kernels, built with Debian's cross compiler and run under qemu-aarch64 (no ARM machine here; the
torch-free harness tests/support/arm64_gemm_harness.cpp checks the portable level's int8 and int4 GEMMs against plain sums).
With the dot-product extension the packed lines go through `sdot`; without it the compiler's own NEON code runs."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT

CXX, QEMU = shutil.which("aarch64-linux-gnu-g++"), shutil.which("qemu-aarch64")
pytestmark = pytest.mark.skipif(not (CXX and QEMU), reason="needs g++-aarch64-linux-gnu and qemu-user (./run tests "
                                                          "installs both)")


@pytest.mark.parametrize("march, uses_sdot", [("armv8.2-a+dotprod", True), ("armv8-a", False)])
def test_the_portable_gemms_compute_the_packed_sums_on_arm64(tmp_path, march, uses_sdot):
    binary = tmp_path / "harness"
    subprocess.run([CXX, "-std=c++20", "-O3", f"-march={march}", "-static", f"-I{ROOT / 'chattts_lab/engines/lab'}",
                    str(ROOT / "tests/support/arm64_gemm_harness.cpp"), "-o", str(binary)], check=True, timeout=300)
    dump = subprocess.run([shutil.which("aarch64-linux-gnu-objdump") or "objdump", "-d", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    assert ("sdot" in dump) == uses_sdot
    run = subprocess.run([QEMU, "-cpu", "max", str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == f"{'sdot' if uses_sdot else 'scalar'}: 0 mismatches", run
