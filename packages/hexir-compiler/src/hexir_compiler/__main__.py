"""`python -m hexir_compiler` is the `hexir` command."""

import sys

from hexir_compiler.cli import main

sys.exit(main())
