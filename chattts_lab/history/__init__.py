"""What was measured, kept and read back: the SQLite store and bundles, comparisons with intervals, the
recommendations, reports and plots.
"""
