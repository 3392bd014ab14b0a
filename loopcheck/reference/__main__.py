"""`python -m loopcheck.reference`: run the reference training loop."""

import sys

from loopcheck.reference.train import main

sys.exit(main())
