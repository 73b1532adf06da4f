"""How far a precision drifts from fp32 stock on the same input and seeds: the fidelity beside the speed.

Both models run ChatTTS on one fixed prompt with a fixed speaker and greedy decoding (top-K 1), with
exactly N audio tokens. Compared, per step, are the GPT's last hidden states (relative error, over
the steps whose inputs are still identical, i.e. up to and including the first diverging step) and
the audio tokens (share of identical tokens over all N steps and 4 codebooks, and the first step
that differs). With synthetic random weights this measures numerics only, not audio quality.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger(__name__)
FIDELITY_TEXT = "Fidelity check, the same words, the same voice, the same seeds."
FIDELITY_SEED = 7
NUMERICS_ONLY = "numerics only: synthetic random weights, so this says nothing about audio quality"


def trace(model, tokens: int) -> dict:
    """Run one greedy generation and capture its audio tokens [T, 4] and last hidden states [T, H]."""
    from chattts_lab.requests import Sampling, SynthesisRequest, Voice
    from chattts_lab.synthesis import speaker_from_seed, synthesize

    chat = model.chat
    captured: dict = {}
    original = chat.gpt.generate

    def capturing_generate(*args, **kwargs):
        for item in original(*args, **kwargs):
            if not kwargs.get("infer_text"):  # audio-code generation, not text refinement
                captured["ids"] = item.ids[0].detach().clone().cpu()
                captured["hiddens"] = item.hiddens[0].detach().float().clone().cpu() if item.hiddens else None
            yield item

    request = SynthesisRequest.of(
        FIDELITY_TEXT, max_new_token=tokens, min_new_token=tokens,
        voice=Voice(speaker=speaker_from_seed(model, FIDELITY_SEED)),
        sampling=Sampling(top_k=1, audio_seed=FIDELITY_SEED),
    )
    engine_generate = chat.gpt.__dict__.get("generate")  # the lab/onnx engines' own, to put back
    chat.gpt.__dict__["generate"] = capturing_generate
    try:
        synthesize(model, request)
    finally:
        if engine_generate is None:
            chat.gpt.__dict__.pop("generate", None)
        else:
            chat.gpt.__dict__["generate"] = engine_generate
    if "ids" not in captured:
        raise RuntimeError("no audio tokens were generated")
    return captured


def compare(reference: dict, candidate: dict) -> dict:
    """Token agreement and hidden-state relative error of a candidate trace against the reference."""
    ref_ids, ids = reference["ids"], candidate["ids"]
    n = min(len(ref_ids), len(ids))
    same = ref_ids[:n] == ids[:n]  # [T, 4]
    diverged = (~same.all(dim=-1)).nonzero()
    first = int(diverged[0, 0]) if len(diverged) else None
    out = {
        "steps": n,
        "token_match": float(same.float().mean()) if n else None,
        "first_divergence": first,
        "hidden_rel_err": None,
        "hidden_rel_err_first_step": None,
    }
    ref_h, h = reference.get("hiddens"), candidate.get("hiddens")
    if ref_h is not None and h is not None and n:
        last = (first if first is not None else n - 1) + 1  # inputs are identical up to the first divergence
        out["hidden_rel_err"] = relative_error(ref_h[:last], h[:last])
        out["hidden_rel_err_first_step"] = relative_error(ref_h[:1], h[:1])
    return out


def relative_error(reference: torch.Tensor, candidate: torch.Tensor) -> float:
    """||candidate - reference|| / ||reference|| (Frobenius norms, in float64)."""
    ref, cand = reference.double(), candidate.double()
    denom = torch.linalg.vector_norm(ref)
    return float(torch.linalg.vector_norm(cand - ref) / denom) if denom > 0 else float("nan")


def measure_fidelity(model: str, device: str, engine: str, precision: str, tokens: int = 32,
                     threads: int | None = None) -> dict:
    """Compare (engine, precision) with fp32 stock on `device`; loads the two models one after the other."""
    from chattts_lab.models import LoadConfig, load_model, unload_all

    reference_model = load_model(LoadConfig(model=model, device=device, precision="fp32", threads=threads))
    synthetic = reference_model.synthetic
    reference = trace(reference_model, tokens)
    del reference_model
    unload_all()
    candidate_model = load_model(LoadConfig(model=model, device=device, precision=precision, threads=threads,
                                            engine=engine))
    dtype = candidate_model.effective.get("dtype_gpt")
    candidate = trace(candidate_model, tokens)
    result = compare(reference, candidate)
    result.update(dtype_gpt=dtype, synthetic=synthetic, note=NUMERICS_ONLY if synthetic else "")
    return result
