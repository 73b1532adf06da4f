"""The page in English and Simplified Chinese: how, and the run-time sentences and plot texts (texts.py); the labels,
help and notes (labels.py). Imports nothing else of the web UI."""
