"""The thresholds of `diff`'s judgements, set from healthy runs, each far beyond what they reached.

benchmarks/study_healthy.py ran launch/train.py without a fault 160 times (128 runs of 200 steps and 32 of
400; 2, 3, 4, 6, 8, 12 and 16 ranks; SGD and Adam; overlap on and off; guard levels 5 and 6; scikit-learn's
digits and the synthetic data; batch 8 and 32; a seed per run: 1,200 rank-runs, 288,000 rank-steps) and
recorded each run's largest value of every statistic:

- a local gradient norm over the larger of its peers' largest at that step and the largest any rank had
  before (from the 4th step on): at most 4.4 (median of the runs' largest 1.4). EXPLOSION sits 23x beyond
  it, NOTE_SPIKE 4.5x. (Against the peers' median alone, healthy runs went 54,000x apart either way: a
  converged model's gradient on one rank's easy batch is tiny beside another's hard one. Neither is a fault.)
- how long the other ranks wait for a rank beyond its own wait, as a fraction of the step (median over the
  steps): at most 0.29 (rank 0 prints every step). STRAGGLER sits 2x beyond it; it only ever makes a note.
"""

EXPLOSION = 100.0  # times the peers' largest and anything before: an error
NOTE_SPIKE = 20.0  # ... short of that but this many times: a note
MIN_HISTORY = 3  # "anything before" counts once this many steps were seen
STRAGGLER = 0.6  # the others wait for a rank this fraction of a step, median over the steps: a note
STRAGGLER_MIN_MS = 2.0  # ... and at least this long
STRAGGLER_MIN_STEPS = 10  # ... over at least this many steps
