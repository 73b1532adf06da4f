"""Serving many listeners: request-level batching (batch, batcher), continuous batching's scheduler, and the
serving benchmark (spec, loadtest, summaries, listening, capacity).
"""
