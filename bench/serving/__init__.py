"""`python -m bench serve`, the serving benchmark: many users against the real app over HTTP (spec, loadtest,
summaries, listening, capacity; the command line: cli). It starts the app; the library never does.
"""
