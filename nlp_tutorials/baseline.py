"""``python -m nlp_tutorials.baseline``: every task's simple baselines, MRPC's by default (see
:mod:`nlp_tutorials.analysis.task_baselines`); its flags are :mod:`nlp_tutorials.cli`'s."""
import sys

import nlp_tutorials.cli as cli


def main(argv=None) -> int:
    """Run ``python -m nlp_tutorials.baseline ARGV``; returns the exit status."""
    return cli.main("baseline", argv)


if __name__ == "__main__":
    sys.exit(main())
