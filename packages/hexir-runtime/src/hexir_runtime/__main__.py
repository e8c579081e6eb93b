"""`python -m hexir_runtime` is `hexir-run`."""

import sys

from hexir_runtime.cli import main

sys.exit(main())
