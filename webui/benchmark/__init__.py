"""The Benchmark tab: its layout and wiring (tab.py), the sweep form (sweep_form.py), a sweep's run (sweep_run.py)
and the history of sweeps (sweep_history.py), the quality panel (quality_panel.py) and the Serving tab
(serving_tab.py). Imports nothing of the Synthesis tab."""
