"""``python -m marl.benchmarks [throughput|smax|agents] ...``: the same as ``marl bench ...``."""

import sys

from marl.benchmarks.cli import main

sys.exit(main())
