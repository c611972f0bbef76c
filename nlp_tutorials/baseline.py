"""``python -m nlp_tutorials.baseline``: the MRPC yardsticks (see
:mod:`nlp_tutorials.analysis.baseline`)."""
import sys

from nlp_tutorials.analysis.baseline import main

if __name__ == "__main__":
    sys.exit(main())
