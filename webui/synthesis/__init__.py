"""The Synthesis tab: its layout and wiring (tab.py), the form and the requests it builds (form.py), synthesis and
streaming handlers (handlers.py), voice cards and the voice library (voice_handlers.py). Imports nothing of the
Benchmark tab."""
