"""Placeholder."""
def stream_infer(*a, **k):
    raise NotImplementedError
