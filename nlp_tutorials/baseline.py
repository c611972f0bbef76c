"""``python -m nlp_tutorials.baseline``: every task's simple baselines, MRPC's by default (see
:mod:`nlp_tutorials.analysis.task_baselines`)."""
import sys

from nlp_tutorials.analysis.task_baselines import main

if __name__ == "__main__":
    sys.exit(main())
