"""What a measurement records beside its timings: wall time and memory (measure), the environment
(env), per-stage clocks (stages), the hardware's floor (roofline), fidelity to stock fp32, statistics.
"""
