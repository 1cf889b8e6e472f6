import sys

from mpwatch.cli import main

sys.exit(main())
