"""What both tabs use: how handlers are wired to Gradio's events (events.py) and how results are shown (present.py).
Imports no tab."""
