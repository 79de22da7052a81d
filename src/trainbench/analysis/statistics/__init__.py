"""The statistics of the runs: per-model timing, intervals, stability, and the busy-machine words."""
