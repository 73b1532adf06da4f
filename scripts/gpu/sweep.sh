#!/usr/bin/env bash
# The CUDA sweep of issue 13 in one device call of at most 8 minutes, from carried wheels; writes a bundle to $OUT.
#
# On the lent GPU (the device tool's `run`; docs/results/README.md has the exact call):
#     bash scripts/gpu/sweep.sh                 carry [".whl"] (scripts/gpu/prepare_wheels.sh fills it), timeout_s 540
# Here, on CPU, the same steps on tiny weights and 8 tokens, importing only what the image has or is carried
# (scripts/gpu/image_only): checks the script, the carried wheels and the bundle, not the GPU:
#     CHATTTS_LAB_GPU_DRY=1 PYTHON=.venv/bin/python bash scripts/gpu/sweep.sh
# Extra arguments go to `python -m bench` after the script's own, so they win: a narrower rerun is
#     bash scripts/gpu/sweep.sh --engine lab --batch 1
#
# Steps, each with its own time limit so a failure costs seconds, never the lease:
#   1. the carried wheels into /tmp/site (the image has torch, transformers, pandas ... but not ChatTTS or plotly)
#   2. scripts/gpu/prepare_machine.py: versions, an independent GPU bandwidth check, the full-size synthetic checkpoint
#   3. the sweep: engines onnx,lab,stock x fp32,fp16,bf16,int8 x batch 1,8,32, 128 tokens. Each cell in a fresh process
#      (--passes 1) so each row is committed as it ends and a deadline loses at most the cell it interrupts; its own
#      --timeout; the sweep's environment records the GPU's read bandwidth, from which each row's roofline follows.
#      Cells that cannot run are rows with the reason (stock int8 has CPU kernels only; the image's onnxruntime
#      has no CUDA provider). Order: onnx (rule rows, instant), then lab (the issue's GPU target), then stock.
#   4. scripts/gpu/finish_sweep.py: cells the deadline left out become `cancelled` rows saying so; the bundle; a table
#   5. the reports (results.md, results.html) from the same store
#
# Time (estimated, not yet measured on an H200): 21 cells run (lab 12, stock 9; onnx and stock int8 are rule rows).
# A cell is about 8 s of process start, imports and load, then 4 calls (the cold one, --warmup 0, 3 timed): lab
# about 1 s a call, stock about 2.5 s (eager Hugging Face Llama, launch-bound), so about 160 s for lab, 160 s for
# stock, 80 s for 6 fidelity processes and 40 s for the rest: about 440 s. The deadline (CHATTTS_LAB_GPU_BUDGET_S,
# 450 s) stops the sweep 45 s early enough for steps 4 and 5; what it cuts first is fidelity (it runs last), then
# the last stock cells. Whatever hangs, every step's limit ends the script within about 500 s (timeout_s 540).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DRY=${CHATTTS_LAB_GPU_DRY:-0}
BUDGET_S=${CHATTTS_LAB_GPU_BUDGET_S:-450}
RESERVE_S=45  # for steps 4 and 5 after the sweep's deadline
OUT=${OUT:-$ROOT/results/gpu-sweep}
WORK=${CHATTTS_LAB_GPU_WORK:-/tmp/chattts_lab_gpu}
PY=${PYTHON:-python3}
if [ "$DRY" = 1 ]; then
    GRID=(--model synthetic-tiny --device cpu --tokens 8 --fidelity-tokens 8 --timeout 120)
else
    GRID=(--model synthetic --device cuda --tokens 128 --fidelity-tokens 32 --timeout 90)
fi
GRID+=(--engine onnx,lab,stock --precision fp32,fp16,bf16,int8 --batch 1,8,32 --passes 1 --warmup 0 --repeats 3
       --min-time 0)

run_all() {
    rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        TQDM_DISABLE=1  # no progress bars in the log: each cell that does not run still prints its reason
    if [ "$DRY" = 1 ]; then  # only what the GPU machine will have: its image and the carried wheels
        export PYTHONPATH="$ROOT/scripts/gpu/image_only:$PYTHONPATH"
    else
        if ls .whl/*.whl >/dev/null 2>&1; then
            timeout 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site" \
                || echo "WARNING: installing the carried wheels failed; cells will say what is missing"
        else
            echo "WARNING: no .whl/ here: run scripts/gpu/prepare_wheels.sh where pip works and carry [\".whl\"]"
        fi
    fi
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null
    local model=${GRID[1]}  # the grid's --model
    timeout 240 "$PY" scripts/gpu/prepare_machine.py --model "$model" --out "$WORK/machine.json" \
        || echo "WARNING: step 2 failed or ran out of time"
    cat "$WORK/machine.json" && echo

    local sweep_s=$((BUDGET_S - SECONDS - RESERVE_S))
    echo "== sweep: ${sweep_s} s left for it (deadline of the whole: ${BUDGET_S} s)"
    if [ "$sweep_s" -gt 30 ]; then
        timeout -k 15 "$sweep_s" "$PY" -m bench "${GRID[@]}" "$@" --db "$WORK/lab.sqlite" --out "$WORK/report" \
            --format md --yes
        local rc=$?
        [ "$rc" = 124 ] && echo "== the sweep stopped at its deadline; its finished rows are kept" \
            || echo "== the sweep exited with $rc"
    else
        echo "== no time left for the sweep: steps 1 and 2 took ${SECONDS} s"
    fi

    local gpu
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-')
    local bundle="$OUT/sweep-$([ "$DRY" = 1 ] && echo dry-tiny || echo "cuda-${gpu:-no-gpu}").json"
    timeout 40 "$PY" scripts/gpu/finish_sweep.py "$WORK/lab.sqlite" "$bundle" --machine "$WORK/machine.json" || return 1
    timeout 40 "$PY" -m bench --db "$WORK/lab.sqlite" --report 1 --out "$OUT" --format md,html >/dev/null
    cp "$WORK/machine.json" "$OUT/"
    echo "== bundle $bundle ($(du -h "$bundle" | cut -f1)), after ${SECONDS} s; import it with python -m bench --import"
}

mkdir -p "$OUT"
run_all "$@" 2>&1 | tee "$OUT/sweep.log"
