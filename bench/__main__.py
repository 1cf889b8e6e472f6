"""`python -m bench [--quick] [--only NAME ...] [--output PATH]`."""
import sys

from bench.harness import main

sys.exit(main())
