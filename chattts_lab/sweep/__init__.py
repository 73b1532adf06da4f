"""A sweep described as data (spec, axes, options, grid) and run: the runner, its events, interleaved passes,
the one worker supervisor and the worker process, fleet sweeps on Ray (cluster, fleet), the result types.
"""
