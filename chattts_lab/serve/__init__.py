"""The runtime that answers requests: the path from a request to the model (speech), request-level batching (batch,
batcher), continuous batching's scheduler, the serving policy, the OpenAI-compatible routes and their errors
(openai_api, openai_errors), and the Ray Serve deployment (rayserve, `python -m chattts_lab.serve.rayserve`).
"""
